"""One job's worker process as the daemon sees it: spawn, messages, log, termination.

The worker writes JSON messages on stdout and its log (plus anything the job
prints) on stderr. Neither is trusted: messages are framed by newlines with a
size limit, read in chunks so a large one costs linear time, and made strict
JSON before they go further; the log is copied in chunks with every secret
removed (even one split across reads or holding a newline) and with lines cut
at :data:`MAX_LOG_LINE_CHARS`. Whatever goes wrong while reading, the caller
gets an exception and concludes the job: a worker is never left unread.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import logging
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

from sparkrun.core import strict_json
from sparkrun.core.events import Event
from sparkrun.core.processes import MARKER_VARIABLE, ProcessIdentity, new_marker
from sparkrun.core.redaction import Redactor, StreamRedactor
from sparkrun.daemon.worker import MAX_RESULT_BYTES
from sparkrun.errors import SparkrunError

__all__ = ["MAX_LOG_LINE_CHARS", "MAX_MESSAGE_BYTES", "WorkerProcess", "WorkerProtocolError", "event_of"]

_log = logging.getLogger(__name__)

#: A message line longer than this ends the job (a result is at most MAX_RESULT_BYTES).
MAX_MESSAGE_BYTES = MAX_RESULT_BYTES + 64 * 1024
#: The worker log gets a line break after this many characters without one.
MAX_LOG_LINE_CHARS = 64 * 1024
_CHUNK = 64 * 1024
_SUSPECT = re.compile(rb"NaN|Infinity|\\u[dD][89a-fA-F]")  # what may make a line non-strict JSON


class WorkerProtocolError(SparkrunError):
    """The worker broke the message protocol (a message over the size limit)."""


def _strict(line: bytes) -> Any:
    """A message line as strict JSON: non-finite numbers become null, lone surrogates U+FFFD."""
    if _SUSPECT.search(line) is None:
        return json.loads(line)
    return strict_json.made_safe(json.loads(line, parse_constant=lambda name: None, parse_float=_finite))


def _finite(text: str) -> float | None:
    number = float(text)
    return number if number - number == 0 else None


def _bounded(text: str, run: int) -> tuple[str, int]:
    """``text`` with a newline inserted wherever a line would exceed the limit; ``run`` carries across calls."""
    if run + len(text) <= MAX_LOG_LINE_CHARS and "\n" not in text:
        return text, run + len(text)
    out = []
    for index, part in enumerate(text.split("\n")):
        if index:
            out.append("\n")
            run = 0
        while run + len(part) > MAX_LOG_LINE_CHARS:
            take = MAX_LOG_LINE_CHARS - run
            out += (part[:take], "\n")
            part, run = part[take:], 0
        out.append(part)
        run += len(part)
    return "".join(out), run


def event_of(message: dict[str, Any]) -> Event | None:
    """The event an ``event`` message of the worker carries; None if it carries none.

    The worker's pipe is a process boundary, and this is where its events become typed. Checked: the
    event is a JSON object with a string ``operation_id`` (what the journal and the job observers go
    by). The rest is taken as the worker's operation delivered it, validated where it was produced;
    an event of a type this daemon does not know passes too, so it is journaled and streamed like any.
    """
    event = message.get("event")
    if isinstance(event, dict) and isinstance(event.get("operation_id"), str):
        return cast(Event, event)
    return None


class WorkerProcess:
    """A running ``python -m sparkrun.daemon.worker``, in its own session."""

    def __init__(self, process: asyncio.subprocess.Process, identity: ProcessIdentity, redactor: Redactor) -> None:
        self.process = process
        self.identity = identity
        self.redactor = redactor

    @classmethod
    async def spawn(cls, redactor: Redactor) -> WorkerProcess:
        marker = new_marker()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sparkrun.daemon.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, MARKER_VARIABLE: marker},
        )
        return cls(process, ProcessIdentity.of(process.pid, marker=marker), redactor)

    @property
    def pid(self) -> int:
        return self.process.pid

    async def send(self, message: dict[str, Any]) -> None:
        """One JSON line to the worker's stdin (the job, then prompt answers)."""
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write((strict_json.dumps(message) + "\n").encode())
        await stdin.drain()

    async def messages(self) -> AsyncIterator[list[dict[str, Any]]]:
        """The worker's messages, a batch per read (so one read's events share one journal commit)."""
        stream = self.process.stdout
        assert stream is not None
        buffer = bytearray()
        while chunk := await stream.read(_CHUNK):
            scanned = len(buffer)
            buffer += chunk
            batch, start = [], 0
            while (newline := buffer.find(b"\n", scanned)) >= 0:
                line = bytes(buffer[start:newline])
                start = scanned = newline + 1
                if line.strip():
                    message = self._parse(line)
                    if message is not None:
                        batch.append(message)
            del buffer[:start]
            if len(buffer) > MAX_MESSAGE_BYTES:
                raise WorkerProtocolError(
                    f"the worker sent a message over the size limit (bytes>{MAX_MESSAGE_BYTES}, "
                    f"limit={MAX_MESSAGE_BYTES})"
                )
            if batch:
                yield batch

    def _parse(self, line: bytes) -> dict[str, Any] | None:
        if len(line) > MAX_MESSAGE_BYTES:
            raise WorkerProtocolError(
                f"the worker sent a message over the size limit (bytes={len(line)}, limit={MAX_MESSAGE_BYTES})"
            )
        try:
            message = _strict(line)
        except (ValueError, RecursionError):
            message = None
        if not isinstance(message, dict) or not isinstance(message.get("kind"), str):
            _log.warning("worker %d: unreadable message dropped (%d bytes)", self.pid, len(line))
            return None
        return message

    async def copy_log(self, path: Path) -> None:
        """Append the worker's stderr to ``path``, without secrets and with bounded lines, until it closes.

        A log that cannot be written is reported once and the stream is still
        drained, so the worker never blocks on a full pipe.
        """
        stream = self.process.stderr
        assert stream is not None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        redact = StreamRedactor(self.redactor)
        run = 0
        log = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            log = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in finally
        except OSError as error:
            _log.warning("worker %d: cannot write its log (path=%s, %s)", self.pid, path, error.strerror)
        try:
            while True:
                chunk = await stream.read(_CHUNK)
                text = redact.feed(decoder.decode(chunk, final=not chunk))
                if not chunk:
                    text += redact.flush()
                text, run = _bounded(text, run)
                if log is not None and text:
                    try:
                        log.write(text)
                        log.flush()
                    except OSError as error:
                        _log.warning("worker %d: cannot write its log (path=%s, %s)", self.pid, path, error.strerror)
                        log.close()
                        log = None
                if not chunk:
                    return
        finally:
            if log is not None:
                log.close()

    async def terminate(self, grace: float) -> None:
        """End the worker's whole process group: SIGTERM, then SIGKILL after ``grace`` seconds.

        Signals go only while the worker has not been reaped: until then its pid (and group id) is
        still its own and cannot have been reused.
        """
        pid = self.process.pid
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if self.process.returncode is None and pid > 1 and pid != os.getpgrp():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, sig)
            try:
                await asyncio.wait_for(asyncio.shield(self.process.wait()), wait)
                return
            except TimeoutError:
                continue

    async def wait(self) -> int:
        return await self.process.wait()
