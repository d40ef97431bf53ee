"""Job lifecycle in the daemon: queue, isolated workers, prompts, cancellation.

Runs on the server's event loop. Each job's worker is a separate process in
its own session; its messages are read in chunks, so the events one read
delivers are journaled in one transaction, and stream subscribers are woken
as soon as they are written.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkrun.core.operation import new_operation_id
from sparkrun.daemon.journal import TERMINAL_STATES, JobRecord, Journal
from sparkrun.daemon.operations import find_operation
from sparkrun.daemon.worker import Redactor
from sparkrun.errors import SparkrunError

__all__ = ["JobConflict", "JobManager", "JobObserver", "PromptError"]

_log = logging.getLogger(__name__)
_CANCEL_GRACE_SECONDS = 3.0


class JobConflict(SparkrunError):
    """The request does not fit the job's state (e.g. cancelling a finished job)."""


class PromptError(SparkrunError):
    """No such prompt, or an answer that does not fit it."""


class JobObserver(Protocol):
    """Sees every job's start, journaled events and end (the daemon's metrics)."""

    def job_started(self, operation_id: str, operation: str, started_at: float) -> None: ...

    def job_events(self, operation_id: str, events: list[dict[str, Any]]) -> None: ...

    def job_finished(self, operation_id: str, state: str, finished_at: float) -> None: ...


@dataclass
class _Running:
    process: asyncio.subprocess.Process
    redactor: Redactor = field(default_factory=Redactor)  # the daemon is the last gate for secrets
    prompts: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: bool = False
    outcome: tuple[str, Any] | None = None  # ("result", value) or ("error", {...})


class JobManager:
    """Owns every job of this daemon; all methods run on the event loop."""

    def __init__(self, journal: Journal, state_dir: Path, *, max_workers: int = 4, plugins: list[str] | None = None):
        self.journal = journal
        self.state_dir = state_dir
        self.max_workers = max_workers
        self.plugins = list(plugins or [])
        self._running: dict[str, _Running] = {}
        self._slots = 0  # jobs started or starting: counted before the worker is spawned
        self._closing = False
        self._queue: deque[str] = deque()
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.worker_logs = state_dir / "daemon" / "workers"
        self.observers: list[JobObserver] = []

    # -- recovery -------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Mark jobs a previous daemon left unfinished as ``lost``, ending any stray worker."""
        lost = []
        for job in self.journal.jobs(limit=100_000, states=("queued", "running", "waiting_input")):
            if job.worker_pid:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(job.worker_pid, signal.SIGKILL)
            error = {"type": "WorkerLost", "message": "the daemon restarted while this job was unfinished"}
            self.journal.update_job(job.job_id, state="lost", finished_at=time.time(), error=error)
            lost.append(job.job_id)
        return lost

    # -- submission -----------------------------------------------------------------

    def submit(self, operation: Any, arguments: Any) -> JobRecord:
        """Validate and queue a job; raises ValueError / UnknownOperation for bad input."""
        definition = find_operation(operation)
        checked = definition.validate({} if arguments is None else arguments)
        job = self.journal.create_job(uuid.uuid4().hex, definition.name, checked, new_operation_id())
        self._queue.append(job.job_id)
        self._start_queued()
        return self.journal.job(job.job_id) or job

    def _start_queued(self) -> None:
        while self._queue and self._slots < self.max_workers and not self._closing:
            job_id = self._queue.popleft()
            self._slots += 1
            task = asyncio.get_running_loop().create_task(self._run(job_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _spawn(self, job: JobRecord) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "sparkrun.daemon.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            limit=2**22,
        )

    async def _copy_log(self, job_id: str, running: _Running, stream: asyncio.StreamReader) -> None:
        """Write the worker's stderr (its log, and its children's output) to disk, redacted line by line."""
        self.worker_logs.mkdir(parents=True, exist_ok=True)
        with open(self.worker_logs / f"{job_id}.log", "a", encoding="utf-8") as log:
            while line := await stream.readline():
                log.write(running.redactor.text(line.decode("utf-8", errors="replace")))
                log.flush()

    async def _run(self, job_id: str) -> None:
        try:
            await self._run_worker(job_id)
        finally:
            self._slots -= 1
            self._start_queued()

    async def _run_worker(self, job_id: str) -> None:
        job = self.journal.job(job_id)
        if job is None or job.state != "queued":
            return
        try:
            process = await self._spawn(job)
        except OSError as error:
            self._finish(job_id, "failed", error={"type": type(error).__name__, "message": str(error)})
            return
        running = self._running[job_id] = _Running(process)
        started = time.time()
        self.journal.update_job(job_id, state="running", started_at=started, worker_pid=process.pid)
        self._notify(lambda observer: observer.job_started(job.operation_id, job.operation, started))
        spec = {
            "job_id": job_id,
            "operation": job.operation,
            "arguments": job.arguments,
            "operation_id": job.operation_id,
            "state_dir": str(self.state_dir),
            "plugins": self.plugins,
        }
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        log_task = asyncio.get_running_loop().create_task(self._copy_log(job_id, running, process.stderr))
        process.stdin.write((json.dumps(spec) + "\n").encode())
        await process.stdin.drain()
        try:
            await self._pump(job_id, running, process.stdout)
        finally:
            code = await process.wait()
            await log_task
            self._running.pop(job_id, None)
            self._conclude(job_id, running, code)

    async def _pump(self, job_id: str, running: _Running, stream: asyncio.StreamReader) -> None:
        pending = b""
        while chunk := await stream.read(2**16):
            lines = (pending + chunk).split(b"\n")
            pending = lines.pop()
            events = []
            for line in lines:
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except json.JSONDecodeError:
                    _log.warning("job %s: unreadable worker message dropped", job_id)
                    continue
                kind = message.get("kind")
                if kind == "event":
                    events.append(running.redactor.value(message["event"]))
                    continue
                if events:  # keep journal order: flush events before acting on anything else
                    self._append(job_id, events)
                    events = []
                if kind == "prompt":
                    self._ask(job_id, running, message["prompt"])
                elif kind in ("result", "error"):
                    running.outcome = (kind, running.redactor.value(message.get(kind)))
            if events:
                self._append(job_id, events)

    def _append(self, job_id: str, events: list[dict[str, Any]]) -> None:
        self.journal.append_many(job_id, events)
        self._wake(job_id)
        if self.observers:
            operation_id = events[0]["operation_id"]
            self._notify(lambda observer: observer.job_events(operation_id, events))

    def _notify(self, call: Any) -> None:
        for observer in self.observers:
            try:
                call(observer)
            except Exception:
                _log.warning("job observer %r failed", observer, exc_info=True)

    def _conclude(self, job_id: str, running: _Running, code: int) -> None:
        if running.cancelled:
            self._finish(job_id, "cancelled", error={"type": "Cancelled", "message": "cancelled by request"})
        elif running.outcome and running.outcome[0] == "result":
            self._finish(job_id, "succeeded", result=running.outcome[1])
        elif running.outcome:
            self._finish(job_id, "failed", error=running.outcome[1])
        else:
            message = f"the worker exited with code {code} before reporting an outcome"
            self._finish(job_id, "failed", error={"type": "WorkerExited", "message": message})

    def _finish(self, job_id: str, state: str, **fields: Any) -> None:
        finished = time.time()
        job = self.journal.update_job(job_id, state=state, finished_at=finished, **fields)
        self._wake(job_id)
        if job.started_at is not None:
            self._notify(lambda observer: observer.job_finished(job.operation_id, state, finished))

    # -- prompts --------------------------------------------------------------------

    def _ask(self, job_id: str, running: _Running, prompt: dict[str, Any]) -> None:
        running.prompts[prompt["prompt_id"]] = prompt
        self.journal.update_job(job_id, state="waiting_input")
        self._wake(job_id)

    def prompts(self, job_id: str) -> list[dict[str, Any]]:
        running = self._running.get(job_id)
        return list(running.prompts.values()) if running else []

    async def answer(self, job_id: str, prompt_id: str, value: Any) -> None:
        """Check an answer against its prompt and hand it to the worker (never stored or logged)."""
        running = self._running.get(job_id)
        prompt = running.prompts.get(prompt_id) if running else None
        if running is None or prompt is None:
            raise PromptError(f"no pending prompt with this id (job_id={job_id}, prompt_id={prompt_id!r})")
        kind = prompt["kind"]
        if kind == "confirm" and not isinstance(value, bool):
            raise ValueError(f"answer to a confirm prompt must be true or false, not {type(value).__name__}")
        if kind == "choice" and value not in (prompt.get("choices") or []):
            raise ValueError(f"answer must be one of {', '.join(prompt['choices'])} (answer={value!r:.60})")
        if kind == "secret" and (not isinstance(value, str) or not value):
            raise ValueError("answer to a secret prompt must be a non-empty string")
        del running.prompts[prompt_id]
        if kind == "secret":
            running.redactor.add(value)
        stdin = running.process.stdin
        assert stdin is not None
        stdin.write((json.dumps({"answer": {"prompt_id": prompt_id, "value": value}}) + "\n").encode())
        await stdin.drain()
        if not running.prompts:
            self.journal.update_job(job_id, state="running")
            self._wake(job_id)

    # -- cancellation ---------------------------------------------------------------

    async def cancel(self, job_id: str) -> JobRecord:
        job = self.journal.job(job_id)
        if job is None:
            raise KeyError(job_id)
        if job.state in TERMINAL_STATES:
            raise JobConflict(f"the job is already finished (job_id={job_id}, state={job.state})")
        if job_id in self._queue:
            self._queue.remove(job_id)
            self._finish(job_id, "cancelled", error={"type": "Cancelled", "message": "cancelled before it started"})
            return self.journal.job(job_id) or job
        running = self._running.get(job_id)
        if running is not None:
            running.cancelled = True
            await self._terminate(running.process)
        return self.journal.job(job_id) or job

    async def _terminate(self, process: asyncio.subprocess.Process) -> None:
        for sig, wait in ((signal.SIGTERM, _CANCEL_GRACE_SECONDS), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                await asyncio.wait_for(asyncio.shield(process.wait()), wait)
                return
            except TimeoutError:
                continue

    async def shutdown(self) -> None:
        """Stop every worker (the daemon is exiting); running and queued jobs end as cancelled."""
        self._closing = True
        for waiters in list(self._waiters.values()):  # wake every stream so it can end
            for future in waiters:
                if not future.done():
                    future.set_result(None)
        while self._queue:
            self._finish(
                self._queue.popleft(), "cancelled", error={"type": "Cancelled", "message": "the daemon stopped"}
            )
        for running in list(self._running.values()):
            running.cancelled = True
            await self._terminate(running.process)
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)

    @property
    def closing(self) -> bool:
        """Whether the daemon is shutting down (streams end instead of waiting)."""
        return self._closing

    # -- wake-ups for stream subscribers ---------------------------------------------

    def waiter(self, job_id: str) -> asyncio.Future[None]:
        """A future resolved at the next write or state change of ``job_id``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(job_id, set()).add(future)
        future.add_done_callback(lambda done: self._waiters.get(job_id, set()).discard(done))
        return future

    def _wake(self, job_id: str) -> None:
        for future in list(self._waiters.pop(job_id, ())):
            if not future.done():
                future.set_result(None)
