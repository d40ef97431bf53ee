"""Server-Sent Events: a job's journaled events, and a deployment's log.

The job stream's ``id:`` is the journal sequence, so a client resumes after
``Last-Event-ID``. Events are pushed as soon as they are journaled (each
stream waits on a wake-up future, never polls); trimming under a reader's
feet produces one in-band ``gap`` event from the reader's position to the
next event it receives; a terminal, drained job ends the
stream with an ``end`` event. Every journal and file read runs in a thread,
so neither a slow disk nor a huge log stalls the event loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from sparkrun.core import log_tail
from sparkrun.core.deployments import Deployment
from sparkrun.daemon.jobs import JobManager
from sparkrun.daemon.journal import TERMINAL_STATES, CursorExpired

__all__ = ["CountedStream", "event_stream", "log_stream", "sse"]

_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_LOG_POLL_SECONDS = 0.2
_HOST_LOG_BUFFER = 1000


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


class CountedStream(StreamingResponse):
    """A Server-Sent Events response that gives its subscriber slot back however it ends."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=_HEADERS)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


async def event_stream(
    manager: JobManager, job_id: str, cursor: int, *, follow: bool, batch: int, keepalive: float
) -> AsyncIterator[str]:
    """The job's events after ``cursor``, then (with ``follow``) new ones until the job ends."""
    journal, after = manager.journal, cursor
    missed_after: int | None = None  # set once events after the reader's position were trimmed
    while True:
        wake = manager.wakeups.waiter(job_id)  # registered before reading: no write can slip between
        try:
            rows = await manager.read(journal.read, job_id, after=after, limit=batch)
        except CursorExpired as error:
            wake.cancel()
            missed_after = after if missed_after is None else missed_after
            after = error.first_retained - 1
            continue
        if missed_after is not None:  # one gap from where the reader was to what it gets next
            first = rows[0][0] if rows else after + 1
            yield sse("gap", {"after": missed_after, "first_retained": first})
            missed_after = None
        if rows:
            wake.cancel()
            yield "".join(f"id: {seq}\ndata: {text}\n\n" for seq, text in rows)
            after = rows[-1][0]
            continue
        job = await manager.read(journal.job, job_id)
        if job is not None and job.state in TERMINAL_STATES:
            wake.cancel()
            yield sse("end", {"state": job.state, "last_seq": job.last_seq})
            return
        if not follow or manager.closing:
            wake.cancel()
            return
        try:
            await asyncio.wait_for(wake, keepalive)
        except TimeoutError:
            yield ": keepalive\n\n"


def _log_step(path: Path, position: int, deployment: Deployment, follow: bool) -> tuple[list[str], int, bool]:
    placement = deployment.placements[0]  # the route serves deployments of this machine only
    ended = not follow or not placement.identity.matches()  # checked before reading, so the last lines are read
    lines, position, had_data = log_tail.read_new(path, position, final=ended)
    return lines, position, ended and not had_data


async def log_stream(
    manager: JobManager, deployment: Deployment, tail: int | None, *, follow: bool, keepalive: float
) -> AsyncIterator[str]:
    """A deployment's log lines as ``data:`` events (JSON strings), then an ``end`` event."""
    path = Path(deployment.log_path)
    lines, position = await manager.read(log_tail.start, path, tail)
    idle = 0.0
    while True:
        if lines:
            yield "".join(f"data: {json.dumps(line)}\n\n" for line in lines)
            idle = 0.0
        lines, position, done = await manager.read(_log_step, path, position, deployment, follow)
        if lines:
            continue
        if done or manager.closing:
            yield sse("end", {"deployment": deployment.name})
            return
        await asyncio.sleep(_LOG_POLL_SECONDS)
        idle += _LOG_POLL_SECONDS
        if idle >= keepalive:
            idle = 0.0
            yield ": keepalive\n\n"


class _Ended:
    """The end of a host log stream (with the reason if it failed)."""

    def __init__(self, reason: str | None = None) -> None:
        self.reason = reason


async def host_log_stream(
    deployment: Deployment, lines: Callable[[threading.Event], Iterator[str]], *, keepalive: float
) -> AsyncIterator[str]:
    """Log lines read by ``lines`` in a thread (over SSH, from every host), as ``data:`` events, then ``end``.

    The reading thread hands lines over through a bounded queue; when the
    client goes away, ``cancel`` ends the read within a fraction of a second,
    quiet hosts included.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[str | _Ended] = asyncio.Queue()
    cancel = threading.Event()

    def pump() -> None:
        ended = _Ended()
        try:
            for line in lines(cancel):
                loop.call_soon_threadsafe(queue.put_nowait, line)
                while queue.qsize() > _HOST_LOG_BUFFER and not cancel.wait(0.05):
                    pass  # a slow client holds the hosts back rather than filling memory
                if cancel.is_set():
                    return
        except Exception as error:  # an unreachable host: said in the end event
            ended = _Ended((str(error).splitlines() or [type(error).__name__])[0])
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, ended)

    reader = threading.Thread(target=pump, name=f"sparkrun-host-log-{deployment.name}", daemon=True)
    reader.start()
    try:
        while True:
            try:
                item = await asyncio.wait_for(queue.get(), keepalive)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            if isinstance(item, _Ended):
                yield sse("end", {"deployment": deployment.name, **({"error": item.reason} if item.reason else {})})
                return
            yield f"data: {json.dumps(item)}\n\n"
    finally:
        cancel.set()
