"""Running a ColdSnap controller: its own process group, the request on stdin, the timing stream read live.

The controller is invoked as the contract says (``<controller> <operation>
--request-json - [--prepare-only] --receipt-json DIR/operation.json
--timing-events DIR/timing.ndjson``). While it runs, its timing file is
followed and each record is handed to ``on_record`` as soon as its line is
complete, so spans show up while the controller still works. A timing
stream that breaks a rule stops being read (a warning later; the receipt is
authoritative) but the controller is still waited for.

Cancel (Ctrl+C, a daemon job's cancel) follows the contract: SIGTERM to the
controller's group, then wait up to the grace period while it cleans up,
still reading its stream; a second interrupt, or the grace running out,
sends SIGKILL and the run is reported as "cleanup unconfirmed".
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sparkrun.errors import ColdSnapError, OperationCancelled
from sparkrun.plugins.coldsnap.timing import TimingFile, TimingRecord, TimingStream

__all__ = ["MAX_STDOUT_BYTES", "ControllerRun", "run_controller"]

_log = logging.getLogger(__name__)
#: The prepare-only object is small; anything past this is not read into memory.
MAX_STDOUT_BYTES = 1 << 20
#: The end of the controller's stderr kept for error messages.
_STDERR_TAIL_BYTES = 16 << 10
_POLL_SECONDS = 0.05
_KILL_WAIT_SECONDS = 10.0


@dataclass
class ControllerRun:
    """What one controller invocation did."""

    exit_code: int | None
    stdout: str
    stdout_truncated: bool
    stderr_tail: str
    stream: TimingStream
    stream_error: str | None
    receipt_path: Path
    timing_path: Path


class _Output(threading.Thread):
    """Drains one pipe: keeps the first ``head`` bytes or the last ``tail`` bytes, discards the rest."""

    def __init__(self, pipe: IO[bytes], *, head: int = 0, tail: int = 0) -> None:
        super().__init__(name="coldsnap-controller-output", daemon=True)
        self._pipe, self._head, self._tail = pipe, head, tail
        self._kept = bytearray()
        self._last: collections.deque[bytes] = collections.deque()
        self._last_size = 0
        self.truncated = False

    def run(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            while chunk := self._pipe.read1(65536):  # type: ignore[attr-defined]
                if self._head:
                    room = self._head - len(self._kept)
                    self._kept += chunk[:room]
                    self.truncated = self.truncated or len(chunk) > room
                if self._tail:
                    self._last.append(chunk)
                    self._last_size += len(chunk)
                    while self._last_size - len(self._last[0]) >= self._tail:
                        self._last_size -= len(self._last.popleft())

    def text(self) -> str:
        data = bytes(self._kept) if self._head else b"".join(self._last)[-self._tail :]
        return data.decode("utf-8", errors="replace")


def _feed_stdin(pipe: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):  # a controller may exit without reading it all
        pipe.write(data)
    with contextlib.suppress(BrokenPipeError, OSError):
        pipe.close()


class _Follower:
    """Feeds complete timing lines to the stream and the callback; stops reading at the first broken rule."""

    def __init__(self, path: Path, stream: TimingStream, on_record: Callable[[TimingRecord], None]) -> None:
        self._file, self.stream, self._on_record = TimingFile(path), stream, on_record
        self.error: str | None = None

    def poll(self, *, final: bool = False) -> None:
        if self.error is not None:
            return
        try:
            lines = self._file.read_lines()
            if final:
                rest = self._file.finish()
                lines = [*lines, rest] if rest else lines
            for line in lines:
                record = self.stream.feed(line)
                self._on_record(record)
        except ValueError as error:  # a broken rule (TimingError), or a span the feedback contract refused
            self.error = str(error)
        except OSError as error:
            self.error = f"the timing file could not be read: {error}"


def _signal(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    """Signal the controller's group while the controller is unreaped (so its pid is still its own)."""
    if process.poll() is None and process.pid > 1:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)


def _wait(process: subprocess.Popen[bytes], follower: _Follower, deadline: float | None) -> bool:
    """Follow the stream until the controller exits (True) or ``deadline`` passes (False)."""
    while process.poll() is None:
        follower.poll()
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(_POLL_SECONDS)
    return True


def run_controller(
    argv: Sequence[str],
    operation: str,
    request_text: str,
    directory: Path,
    *,
    operation_id: str,
    on_record: Callable[[TimingRecord], None],
    prepare_only: bool = False,
    cancel_grace: float = 300.0,
    environment: Mapping[str, str] | None = None,
    on_cancel: Callable[[str], object] | None = None,
) -> ControllerRun:
    """Run the controller once, following its timing stream.

    ``directory`` must be new (the timing file must not exist yet). A cancel
    (``KeyboardInterrupt`` or ``OperationCancelled`` while it runs) is
    carried out as the contract says, ``on_cancel`` is told each step in a
    sentence, and the interrupt is raised again once the controller is gone.
    """
    directory.mkdir(parents=True, exist_ok=False)
    receipt, timing = directory / "operation.json", directory / "timing.ndjson"
    command = [*argv, operation, "--request-json", "-"]
    if prepare_only:
        command.append("--prepare-only")
    command += ["--receipt-json", str(receipt), "--timing-events", str(timing)]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, **(environment or {})},
        )
    except OSError as error:
        raise ColdSnapError(f"the ColdSnap controller could not be started ({error.strerror}: {argv[0]})") from None
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    threading.Thread(
        target=_feed_stdin, args=(process.stdin, request_text.encode()), name="coldsnap-request", daemon=True
    ).start()
    stdout, stderr = _Output(process.stdout, head=MAX_STDOUT_BYTES), _Output(process.stderr, tail=_STDERR_TAIL_BYTES)
    stdout.start()
    stderr.start()
    follower = _Follower(timing, TimingStream(operation_id), on_record)
    try:
        _wait(process, follower, None)
    except (KeyboardInterrupt, OperationCancelled):
        _cancel(process, follower, cancel_grace, on_cancel or (lambda text: None))
        follower.poll(final=True)  # the cleanup's spans
        raise
    finally:
        if process.poll() is None:  # an error of our own: never leave the controller behind
            _signal(process, signal.SIGKILL)
            process.wait()
    follower.poll(final=True)
    stdout.join(_KILL_WAIT_SECONDS)
    stderr.join(_KILL_WAIT_SECONDS)
    run = ControllerRun(
        exit_code=process.returncode,
        stdout=stdout.text(),
        stdout_truncated=stdout.truncated,
        stderr_tail=stderr.text(),
        stream=follower.stream,
        stream_error=follower.error,
        receipt_path=receipt,
        timing_path=timing,
    )
    return run


def _cancel(process: subprocess.Popen[bytes], follower: _Follower, grace: float, say: Callable[[str], object]) -> None:
    """SIGTERM, wait up to ``grace`` still following the stream; SIGKILL after it or a second interrupt."""
    _signal(process, signal.SIGTERM)
    say(f"Cancelling: the controller is cleaning up (up to {grace:g} s; interrupt again to kill it)")
    try:
        if _wait(process, follower, time.monotonic() + grace):
            say(f"The controller cleaned up and exited (exit code {process.returncode})")
            return
    except (KeyboardInterrupt, OperationCancelled):
        pass
    _signal(process, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(_KILL_WAIT_SECONDS)
    say("The controller was killed: cleanup unconfirmed")
