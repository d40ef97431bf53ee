"""Reading small text files that users name: regular files only, bounded, UTF-8.

Recipes and the configuration file come from paths a user, a directory
listing or a symlink supplies. A FIFO would block the reader, ``/dev/zero``
would never end and a huge file would be read whole, so the file is opened
without blocking, must be a regular file, and is read only up to a limit.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sparkrun.errors import SparkrunError

__all__ = ["read_text_file"]

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "another kind of file")


def read_text_file(path: Path, *, what: str, limit: int, error: type[SparkrunError]) -> str:
    """The UTF-8 text of the regular file at ``path``, at most ``limit`` bytes long.

    Every failure raises ``error`` with one line that starts with ``what``
    (say, "recipe") and names the path: unreadable, not a regular file, too
    large, or not UTF-8 (with the offset of the first bad byte).
    """
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        raise error(f"cannot read {what} (path={path}, {exc.strerror})") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{what} is not a regular file (path={path}, {_kind(info.st_mode)})")
        if info.st_size > limit:
            raise error(f"{what} is too large (path={path}, {info.st_size} bytes, limit {limit} bytes)")
        data = bytearray()
        while len(data) <= limit:
            chunk = os.read(fd, limit + 1 - len(data))
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        raise error(f"cannot read {what} (path={path}, {exc.strerror})") from exc
    finally:
        os.close(fd)
    if len(data) > limit:  # grew after fstat, or a size the file system does not report
        raise error(f"{what} is too large (path={path}, more than {limit} bytes, limit {limit} bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{what} is not UTF-8 text (path={path}, byte {exc.start})") from None
