"""Running a command on a real pseudo-terminal and reading the screen a person would see.

The command's output goes through a pty (so it takes its terminal code
paths: rich live displays, status lines) and into ``pyte``, a terminal
emulator, whose screen is what a user would have in front of them once the
command ended.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Sequence

import pyte


class Terminal:
    """A finished or running command on a ``columns`` x ``lines`` terminal."""

    def __init__(self, argv: Sequence[str], env: dict[str, str], *, columns: int = 100, lines: int = 40) -> None:
        self.screen = pyte.Screen(columns, lines)
        self._stream = pyte.ByteStream(self.screen)
        self.raw = b""
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        env = {**env, "TERM": "xterm-256color", "COLUMNS": str(columns), "LINES": str(lines)}
        env.pop("NO_COLOR", None)
        self.process = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
        os.close(slave)
        self._master = master

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self._master], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self._master, 65536)
        except OSError:  # the command ended and its side of the pty closed
            return False
        if not data:
            return False
        self.raw += data
        self._stream.feed(data)
        return True

    def wait_for(self, predicate: Callable[[Terminal], bool], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; the screen shows:\n{self.text()}")
            ended = not self._read(0.1) and self.process.poll() is not None
            if ended and not predicate(self):
                raise AssertionError(f"the command ended first; the screen shows:\n{self.text()}")

    def finish(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self._read(0.1) or self.process.poll() is None:
            if time.monotonic() > deadline:
                self.process.kill()
                raise AssertionError(f"the command did not end; the screen shows:\n{self.text()}")
        os.close(self._master)
        return self.process.wait(timeout=10)

    def lines(self) -> list[str]:
        """The screen's lines, trailing blanks removed, empty lines at the end dropped."""
        shown = [line.rstrip() for line in self.screen.display]
        while shown and not shown[-1]:
            shown.pop()
        return shown

    def text(self) -> str:
        return "\n".join(self.lines())
