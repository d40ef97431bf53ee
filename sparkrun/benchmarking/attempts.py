"""One attempt of one task: the framework's process, its output, its live progress, its deadline.

The tool runs in its own session (so a timeout or a cancel stops everything
it started) with stdout going to the attempt's log. With a progress parser,
stderr is piped apart: each line is cut to 64 KiB, decoded, redacted, copied
to the log and fed to the parser, whose reports are throttled (a stage,
status, level or total that changes is reported at once, other updates at
most every ``interval`` seconds, the last one always) so a chatty tool
cannot flood the journal. Without a parser, stderr joins the log too.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sparkrun.benchmarking.parsers.base import Fields, ProgressParser
from sparkrun.core.processes import children_of
from sparkrun.errors import BenchmarkError, OperationCancelled

__all__ = ["MAX_LINE_BYTES", "AttemptRun", "Throttle", "run_attempt"]

MAX_LINE_BYTES = 65_536
_CHUNK = 65_536
_KILL_GRACE = 5.0
#: Fields whose change is news: reported at once, never held back.
_NEWS = ("stage", "status", "level", "total", "total_kind")


@dataclass
class AttemptRun:
    """How the attempt's process ended."""

    exit_code: int | None
    timed_out: bool
    duration_seconds: float
    lines: int  # stderr lines the parser saw


class Throttle:
    """Decides which parser updates become reports: news at once, the rest at most every ``interval``."""

    def __init__(self, report: Callable[[Fields], Any], *, interval: float = 0.5) -> None:
        self._report, self._interval = report, interval
        self._last: dict[str, Any] = {}
        self._last_at = float("-inf")
        self._pending: Fields | None = None

    def offer(self, fields: Fields, now: float) -> None:
        news = any(fields.get(key) != self._last.get(key) for key in _NEWS) or fields.get("level") in (
            "warning",
            "error",
        )
        if news or now - self._last_at >= self._interval:
            self._send(fields, now)
        else:
            self._pending = fields

    def flush(self, now: float) -> None:
        """Report what was held back (before the attempt's final report)."""
        if self._pending is not None:
            self._send(self._pending, now)

    def _send(self, fields: Fields, now: float) -> None:
        self._pending, self._last, self._last_at = None, dict(fields), now
        self._report(fields)


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    if process.poll() is None and process.pid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the tool's group, SIGKILL if it is still there after a grace period."""
    _signal_group(process, signal.SIGTERM)
    try:
        process.wait(_KILL_GRACE)
    except subprocess.TimeoutExpired:
        _signal_group(process, signal.SIGKILL)
        process.wait()


class _Lines:
    """Complete lines from a pipe read in chunks; a line longer than the limit is cut, never held whole."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._cutting = False

    def feed(self, chunk: bytes) -> list[bytes]:
        lines = []
        self._buffer += chunk
        while True:
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > MAX_LINE_BYTES:  # an endless line: keep its start, drop the rest
                    if not self._cutting:
                        lines.append(bytes(self._buffer[:MAX_LINE_BYTES]))
                    self._cutting = True
                    self._buffer.clear()
                return lines
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if self._cutting:
                self._cutting = False  # the end of a line already cut
                continue
            lines.append(line[:MAX_LINE_BYTES])

    def rest(self) -> list[bytes]:
        rest = bytes(self._buffer)
        self._buffer.clear()
        return [rest[:MAX_LINE_BYTES]] if rest and not self._cutting else []


def run_attempt(
    argv: Sequence[str],
    *,
    directory: Path,
    environment: Mapping[str, str],
    timeout: float,
    parser: ProgressParser | None,
    on_fields: Callable[[Fields], Any],
    redact: Callable[[str], str] = lambda text: text,
    interval: float = 0.5,
) -> AttemptRun:
    """Run the tool to its end or its deadline; ``KeyboardInterrupt`` or ``OperationCancelled`` stop it too."""
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(directory / "log.txt", "ab") as log:
        before = set(children_of(os.getpid()))
        try:
            process = subprocess.Popen(
                list(argv),
                cwd=directory,
                env={**os.environ, **environment},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.PIPE if parser is not None else log,
                start_new_session=True,
            )
        except OSError as error:
            raise BenchmarkError(f"the benchmark tool could not start ({error.strerror}: {argv[0]})") from None
        except BaseException:  # interrupted while starting it: the child may exist without a Popen to stop it
            for pid in set(children_of(os.getpid())) - before:
                with contextlib.suppress(ProcessLookupError, PermissionError, ChildProcessError):
                    os.killpg(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
            raise
        lines = 0
        try:
            if parser is None:
                try:
                    process.wait(timeout)
                except subprocess.TimeoutExpired:
                    _stop(process)
                    return AttemptRun(process.returncode, True, time.monotonic() - started, 0)
            else:
                assert process.stderr is not None
                throttle = Throttle(on_fields, interval=interval)
                timed_out, lines = _follow(process, process.stderr, log, parser, throttle, redact, started + timeout)
                throttle.flush(time.monotonic())
                if timed_out:
                    return AttemptRun(process.returncode, True, time.monotonic() - started, lines)
        except (KeyboardInterrupt, OperationCancelled):
            _stop(process)
            raise
        finally:
            if process.poll() is None:  # an error of our own: never leave the tool behind
                _stop(process)
    return AttemptRun(process.returncode, False, time.monotonic() - started, lines)


def _follow(
    process: subprocess.Popen[bytes],
    stderr: IO[bytes],
    log: IO[bytes],
    parser: ProgressParser,
    throttle: Throttle,
    redact: Callable[[str], str],
    deadline: float,
) -> tuple[bool, int]:
    """Feed stderr lines to the parser until the pipe closes; True if the deadline passed first."""
    splitter, count = _Lines(), 0
    with selectors.DefaultSelector() as selector:
        selector.register(stderr, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                _stop(process)
                return True, count
            if not selector.select(min(left, 1.0)):
                continue
            chunk = os.read(stderr.fileno(), _CHUNK)
            raw_lines = splitter.feed(chunk) if chunk else splitter.rest()
            for raw in raw_lines:
                line = redact(raw.decode("utf-8", errors="replace"))
                log.write(line.encode("utf-8", errors="replace") + b"\n")
                count += 1
                fields = parser.feed(line)
                if fields is not None:
                    throttle.offer(fields, time.monotonic())
            if not chunk:
                process.wait()
                return False, count
