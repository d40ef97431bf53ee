"""Reading workload logs without trusting their size or their lines.

A log can be gigabytes long and a line can be endless (a ``\\r`` progress
bar never writes a newline). So the tail is found by seeking back from the
end, new data is read in bounded chunks, and a line longer than
:data:`MAX_LINE_BYTES` is cut into pieces of that size. ``sparkrun logs`` and
the daemon's ``/v1/streams/logs`` both read through here; the daemon calls it
from a worker thread so a slow disk never stalls its event loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

__all__ = ["CHUNK_BYTES", "MAX_LINE_BYTES", "follow", "read_new", "start", "tail"]

MAX_LINE_BYTES = 64 * 1024
FOLLOW_POLL_SECONDS = 0.2
CHUNK_BYTES = 1024 * 1024
_BLOCK = 64 * 1024


def _pieces(data: bytes, max_line: int) -> list[str]:
    lines = []
    for raw in data.split(b"\n"):
        for offset in range(0, max(len(raw), 1), max_line):
            lines.append(raw[offset : offset + max_line].decode("utf-8", errors="replace").rstrip("\r"))
    return lines


def tail(path: Path, count: int, *, max_line: int = MAX_LINE_BYTES) -> tuple[list[str], int]:
    """The last ``count`` lines of ``path`` and its size (where reading new lines continues).

    Reads backwards in blocks, at most ``count`` lines of ``max_line`` bytes,
    whatever the file's size. A missing file has no lines.
    """
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return [], 0
    with file:
        size = os.fstat(file.fileno()).st_size
        budget = count * (max_line + 1) + 1
        position, blocks, newlines = size, [], 0
        while count > 0 and position > 0 and newlines <= count and size - position < budget:
            step = min(_BLOCK, position)
            position -= step
            file.seek(position)
            block = file.read(step)
            blocks.append(block)
            newlines += block.count(b"\n")
    data = b"".join(reversed(blocks))
    if not data:
        return [], size
    lines = _pieces(data[:-1] if data.endswith(b"\n") else data, max_line)
    if position > 0:
        lines = lines[1:]  # the first line read is partial unless the file starts there
    return lines[-count:], size


def start(path: Path, tail_count: int | None) -> tuple[list[str], int]:
    """Where reading a log begins: the last ``tail_count`` lines and the offset after them (all of it without)."""
    if tail_count is None:
        return [], 0
    return tail(path, tail_count)


def read_new(
    path: Path, position: int, *, final: bool = False, limit: int = CHUNK_BYTES, max_line: int = MAX_LINE_BYTES
) -> tuple[list[str], int, bool]:
    """Lines written after byte ``position``: (lines, new position, whether any bytes were there).

    Reads at most ``limit`` bytes (at least ``max_line``). A partial last line stays unread until its
    newline arrives (unless ``final``: nothing more will be written), or until
    it exceeds ``max_line``, in which case a piece of that size is returned. A
    file that shrank (replaced by a new run) is read again from its start.
    """
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return [], position, False
    with file:
        if os.fstat(file.fileno()).st_size < position:
            position = 0
        file.seek(position)
        data = file.read(max(limit, max_line + 1))  # a whole line and what follows it: every call makes progress
    if not data:
        return [], position, False
    complete = data.rfind(b"\n") + 1
    if complete:
        return _pieces(data[: complete - 1], max_line), position + complete, True
    if len(data) >= max_line or final:  # a read is longer than max_line: shorter means the end of the file
        piece = data[:max_line]
        taken = len(piece) + (data[max_line : max_line + 1] == b"\n")  # a line of exactly max_line ends here
        return _pieces(piece, max_line), position + taken, True
    return [], position, True


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def follow(path: Path, alive: Callable[[], bool], tail_count: int | None, keep_following: bool) -> Iterator[str]:
    """The last ``tail_count`` lines (all without), then, if ``keep_following``, new ones while ``alive()``.

    Without following, it reads what was there when asked, however fast the
    file grows; following, the last lines of a process that just ended are
    still read before it stops.
    """
    lines, position = start(path, tail_count)
    yield from lines
    end = None if keep_following else _size(path)
    while True:
        ended = end is not None or not alive()  # checked before reading, so its last lines are read
        lines, position, had_data = read_new(path, position, final=ended)
        yield from lines
        if (ended and not had_data) or (end is not None and position >= end):
            return
        if not lines:
            time.sleep(FOLLOW_POLL_SECONDS)
