"""Following the timing file a controller is writing, one complete line at a time.

The controller creates the file itself (it must not exist beforehand) and
flushes after each line, so sparkrun polls: :meth:`TimingFile.read_lines`
returns the complete lines that appeared since the last call and keeps an
unfinished last line for later. Memory stays bounded whatever the controller
writes: the unfinished line is at most one record (64 KiB) plus one read
chunk before it is refused, a complete line longer than a record is refused,
and so is a line beyond the stream's 8192 records.

The file is opened like every untrusted path sparkrun reads (see
:mod:`sparkrun.core.text_files`): without blocking, and only if it is a
regular file, so a FIFO or a device put in its place (directly or through a
symlink) is an error instead of a hang or an endless read.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import TracebackType

from sparkrun.plugins.coldsnap.timing_objects import TimingError

__all__ = ["MAX_RECORDS", "MAX_RECORD_BYTES", "TimingFile"]

#: A record's length in bytes, without its newline.
MAX_RECORD_BYTES = 64 * 1024
#: Records in one stream (the largest ``sequence``).
MAX_RECORDS = 8192
_CHUNK = 64 * 1024
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class TimingFile:
    """The lines of one timing file, read as they are appended.

    Lines are returned without their newline. After an error the reader is
    dead and every call raises it again; lines read before the bad one are
    still returned first, so a stream can take everything that was valid.
    Call :meth:`read_lines` once more after the writer exited, then
    :meth:`finish` for a last line that has no newline.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._partial = bytearray()
        self._lines = 0
        self._failure: TimingError | None = None
        self._finished = False

    def read_lines(self) -> list[bytes]:
        """The complete lines appended since the last call; [] while the file does not exist yet."""
        self._raise_failure()
        if self._finished:
            return []
        lines: list[bytes] = []
        try:
            if self._fd is None and not self._open():
                return []
            self._read(lines)
        except TimingError as exc:
            self._failure = exc
            self.close()
            if not lines:
                raise
        return lines

    def finish(self) -> bytes | None:
        """The last line if the writer ended it without a newline (still a record), else None; closes the file."""
        self._raise_failure()
        self._finished = True
        self.close()
        if not self._partial:
            return None
        line = bytes(self._partial)
        self._partial.clear()
        self._count(line)
        return line

    def close(self) -> None:
        """Close the file (idempotent); the reader returns no more lines."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def __enter__(self) -> TimingFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def _raise_failure(self) -> None:
        if self._failure is not None:
            raise TimingError(str(self._failure), self._failure.line)

    def _open(self) -> bool:
        try:
            fd = os.open(self.path, _OPEN_FLAGS)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise TimingError(f"cannot read the timing file (path={self.path}, {exc.strerror})") from None
        try:
            mode = os.fstat(fd).st_mode
        except OSError as exc:
            os.close(fd)
            raise TimingError(f"cannot read the timing file (path={self.path}, {exc.strerror})") from None
        if not stat.S_ISREG(mode):
            os.close(fd)
            kind = next((name for test, name in _KINDS if test(mode)), "another kind of file")
            raise TimingError(f"the timing file is not a regular file (path={self.path}, {kind})")
        self._fd = fd
        return True

    def _read(self, lines: list[bytes]) -> None:
        assert self._fd is not None
        while True:
            try:
                chunk = os.read(self._fd, _CHUNK)
            except OSError as exc:
                raise TimingError(f"cannot read the timing file (path={self.path}, {exc.strerror})") from None
            if not chunk:
                return
            self._partial += chunk
            start = 0
            while (end := self._partial.find(b"\n", start)) >= 0:
                line = bytes(self._partial[start:end])
                start = end + 1
                self._count(line)
                lines.append(line)
            del self._partial[:start]
            if len(self._partial) > MAX_RECORD_BYTES:
                raise TimingError(
                    f"timing line {self._lines + 1}: more than {MAX_RECORD_BYTES} bytes without a newline; "
                    f"the limit is {MAX_RECORD_BYTES} bytes per record",
                    self._lines + 1,
                )

    def _count(self, line: bytes) -> None:
        """Number ``line`` and refuse it if it is too long or one record too many."""
        self._lines += 1
        if len(line) > MAX_RECORD_BYTES:
            raise TimingError(
                f"timing line {self._lines}: the record is {len(line)} bytes long; "
                f"the limit is {MAX_RECORD_BYTES} bytes",
                self._lines,
            )
        if self._lines > MAX_RECORDS:
            raise TimingError(
                f"timing line {self._lines}: more than {MAX_RECORDS} lines; a stream has at most {MAX_RECORDS} records",
                self._lines,
            )
