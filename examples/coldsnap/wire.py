"""The byte-level rules of the ColdSnap wire that both sides must compute identically.

Canonical JSON and its digest, RFC 3339 timestamps with nanoseconds, strict parsing of the
request, and atomic private file writes. The example controller is the other side of the
wire from sparkrun, so this is written from the contract, not imported from sparkrun.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = [
    "ID_PATTERN",
    "MAX_REQUEST_BYTES",
    "RequestError",
    "canonical_json",
    "digest",
    "parse_strict_json",
    "rfc3339_ns",
    "write_private_atomically",
]

MAX_REQUEST_BYTES = 16 << 20
#: Ids of clocks and spans (and, here, of requests, units and workers).
ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class RequestError(ValueError):
    """The request (or the invocation) cannot be acted on; the message says which field and why."""


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, ASCII with \\uXXXX escapes (surrogate pairs above the BMP), floats as repr."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def digest(value: Any) -> str:
    """``sha256:`` + hex of the canonical JSON: the contract's request_sha256 and timing_sha256."""
    return "sha256:" + hashlib.sha256(canonical_json(value).encode("ascii")).hexdigest()


def rfc3339_ns(unix_ns: int | None = None) -> str:
    """``2026-11-30T21:03:04.123456789Z``: UTC with all nine fractional digits."""
    unix_ns = time.time_ns() if unix_ns is None else unix_ns
    seconds, nanos = divmod(unix_ns, 1_000_000_000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos:09d}Z"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise RequestError(f"the request repeats the key {key!r}")
        result[key] = value
    return result


def _no_constant(name: str) -> Any:
    raise RequestError(f"the request contains {name}, which is not JSON")


def parse_strict_json(data: bytes) -> Any:
    """JSON without duplicate keys, NaN or Infinity, and without trailing data (json.loads refuses that)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequestError(f"the request is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise RequestError(f"the request is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise RequestError("the request is nested too deeply") from None


def write_private_atomically(path: Path, data: bytes) -> None:
    """Write to a 0600 temporary file next to ``path``, fsync, then rename it into place."""
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
