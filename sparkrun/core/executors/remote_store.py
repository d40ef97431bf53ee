"""The receiving end of a relay, run by the agent on the target host: a content-addressed blob store.

A store is ``<hosted>/<store>/blobs/sha256/<hex>`` (``images`` is also an
OCI layout, ``models`` the files of copied models). A blob is written
under a temporary name, hashed as it arrives and renamed into place only if
its digest and size are right, so a blob in place is whole, and an
interrupted relay resumes by sending only what is missing. Standard library
only, Python 3.8+, like the agent.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from sparkrun.core.digests import hash_file
from sparkrun.core.executors.remote_agent import AgentError, Channel, hosted, register

__all__ = ["blob_file", "store_root"]

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_STORES = ("images", "models")
_CHUNK = 1024 * 1024
_MAX_SIZE = 1 << 40


def store_root(name: Any) -> Path:
    if name not in _STORES:
        raise AgentError(f"store is {name!r}; it must be one of {', '.join(_STORES)}", "bad_request")
    root = hosted() / str(name)
    (root / "blobs" / "sha256").mkdir(mode=0o700, parents=True, exist_ok=True)
    return root


def _checked(digest: Any, size: Any) -> tuple[str, int]:
    if not isinstance(digest, str) or _DIGEST.fullmatch(digest) is None:
        raise AgentError(f"digest is {digest!r:.100}; it must be 'sha256:' and 64 lowercase hex digits", "bad_request")
    if type(size) is not int or not 0 <= size <= _MAX_SIZE:
        raise AgentError(
            f"size of {digest} is {size!r:.40}; it must be an integer from 0 to {_MAX_SIZE}", "bad_request"
        )
    return digest, size


def blob_file(root: Path, digest: str) -> Path:
    return root / "blobs" / "sha256" / digest.split(":", 1)[1]


def _stamp(path: Path) -> list[int]:
    """What changes when anything writes, truncates, renames or replaces a file (ctime cannot be set back)."""
    info = path.stat()
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino]


def _record(root: Path, digest: str) -> Path:
    return root / "verified" / digest.split(":", 1)[1]


def _remember(root: Path, digest: str) -> None:
    """Note that the blob as it is now hashed right, so an unchanged blob need not be hashed again."""
    record = _record(root, digest)
    record.parent.mkdir(mode=0o700, exist_ok=True)
    record.write_text(json.dumps(_stamp(blob_file(root, digest))))


def _unchanged(root: Path, digest: str) -> bool:
    try:
        return bool(json.loads(_record(root, digest).read_text()) == _stamp(blob_file(root, digest)))
    except (OSError, ValueError):
        return False


def _have(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """Which of the blobs are in place (by name and size: verification comes last), and the free space."""
    root = store_root(request["store"])
    present = []
    for item in request["blobs"]:
        digest, size = _checked(item.get("digest"), item.get("size"))
        try:
            if blob_file(root, digest).stat().st_size == size:
                present.append(digest)
        except FileNotFoundError:
            pass
    return {"present": present, "free_bytes": shutil.disk_usage(root).free, "root": str(root)}


def _receive(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """Store the blobs that follow: each a JSON header line, then its bytes; ``{"end": true}`` ends them."""
    root = store_root(request["store"])
    _forget_partials(root)
    stored: list[str] = []
    corrupt: list[dict[str, str]] = []
    while True:
        header = json.loads(channel.read_line() or b'{"end": true, "cut": true}')
        if header.get("end"):
            if header.get("cut"):
                raise AgentError("the data ended before its end marker (the connection was cut)", "truncated")
            return {"stored": stored, "corrupt": corrupt}
        digest, size = _checked(header.get("digest"), header.get("size"))
        final = blob_file(root, digest)
        partial = final.with_name(f".{final.name}.partial-{os.getpid()}")
        hasher, remaining = hashlib.sha256(), size
        try:
            with open(partial, "wb") as file:
                while remaining:
                    chunk = channel.read(min(_CHUNK, remaining))
                    if not chunk:
                        raise AgentError(
                            f"the data of {digest} ended after {size - remaining} of {size} bytes", "truncated"
                        )
                    hasher.update(chunk)
                    file.write(chunk)
                    remaining -= len(chunk)
            found = f"sha256:{hasher.hexdigest()}"
            if found != digest:
                corrupt.append({"digest": digest, "found": found})
                channel.send(event="corrupt", digest=digest, found=found)
                continue
            os.replace(partial, final)
            _remember(root, digest)
        finally:
            if partial.exists():
                partial.unlink()
        stored.append(digest)
        channel.send(event="stored", digest=digest, size=size)


def _forget_partials(root: Path) -> None:
    """Delete what receivers that died (an interrupted relay) left half-written; live ones keep theirs."""
    for partial in (root / "blobs" / "sha256").glob(".*.partial-*"):
        pid = partial.name.rsplit("-", 1)[1]
        try:
            os.kill(int(pid), 0)
        except (ValueError, ProcessLookupError):
            partial.unlink(missing_ok=True)
        except PermissionError:
            pass  # a live process of another user


def _verify(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """Check every blob: hashed again unless it is unchanged since it last hashed right (``full``: always)."""
    root = store_root(request["store"])
    full = bool(request.get("full"))
    failures = []
    for index, item in enumerate(request["blobs"], start=1):
        digest, size = _checked(item.get("digest"), item.get("size"))
        path = blob_file(root, digest)
        try:
            trusted = not full and _unchanged(root, digest)
            found, found_size = (digest, path.stat().st_size) if trusted else hash_file(path)
            if not trusted and found == digest and found_size == size:
                _remember(root, digest)
        except FileNotFoundError:
            failures.append({"digest": digest, "reason": "missing"})
            continue
        if found_size != size:
            failures.append({"digest": digest, "reason": f"size {found_size}, expected {size}"})
        elif found != digest:
            failures.append({"digest": digest, "reason": f"content hashes to {found}"})
        channel.send(event="verified", index=index, digest=digest, size=size)
    return {"failures": failures}


register("store.have", _have)
register("store.receive", _receive)
register("store.verify", _verify)
