"""A model directory as content: every regular file with its sha256, hashed once per change.

Weights are gigabytes, so a file's digest is kept in a cache under the state
directory, keyed by path, size, modification time and inode: a copy of an
unchanged model hashes nothing again.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from sparkrun.core.digests import hash_file

__all__ = ["ModelFile", "check_model_name", "model_files"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_CACHE_LIMIT = 100_000


@dataclass(frozen=True)
class ModelFile:
    path: str  # relative, with '/'
    digest: str
    size: int
    mode: int
    source: Path


def check_model_name(name: str) -> str:
    if _NAME.fullmatch(name) is None:
        raise ValueError(f"model name is {name!r}; it must be 1 to 128 letters, digits, '.', '_' or '-'")
    return name


def model_files(directory: Path, cache_path: Path) -> list[ModelFile]:
    """Every regular file under ``directory`` (symbolic links to files are followed, never out of it)."""
    root = directory.resolve()
    if not root.is_dir():
        raise ValueError(f"model is {str(directory)!r}; it must be a directory")
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
        cache = cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        cache = {}
    found, fresh = [], {}
    for path in sorted(root.rglob("*")):
        real = path.resolve()
        if not real.is_file() or root not in real.parents:
            continue
        info = real.stat()
        key = f"{real}\0{info.st_size}\0{info.st_mtime_ns}\0{info.st_ino}"
        digest = cache.get(key) if isinstance(cache.get(key), str) else None
        fresh[key] = digest = digest or hash_file(real)[0]
        relative = path.relative_to(root).as_posix()
        found.append(ModelFile(relative, digest, info.st_size, info.st_mode & 0o777, real))
    if not found:
        raise ValueError(f"model directory {str(directory)!r} holds no files")
    if len(fresh) <= _CACHE_LIMIT:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = cache_path.with_suffix(".tmp")
        temporary.write_text(json.dumps({**cache, **fresh} if len(cache) < _CACHE_LIMIT else fresh), encoding="utf-8")
        os.replace(temporary, cache_path)
    return found
