"""The sha256 of a file of any size, read in chunks into one reused buffer.

Standard library only: the remote agent sends it to hosts with itself, so
the sender's model hashes and the receiver's blob checks are one function.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

__all__ = ["hash_file"]

_CHUNK = 1024 * 1024


def hash_file(path: Path, chunk: int = _CHUNK) -> tuple[str, int]:
    """``sha256:<hex>`` and the size of the file at ``path``."""
    digest, size = hashlib.sha256(), 0
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        while count := file.readinto(buffer):
            digest.update(view[:count])
            size += count
    return f"sha256:{digest.hexdigest()}", size
