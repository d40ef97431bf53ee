"""Job lifecycle in the daemon: queue, isolated workers, prompts, cancellation.

Runs on the server's event loop. A job is tracked from its submission until
it is terminal, so a cancel accepted in any non-terminal state takes effect
(before the worker exists, while it starts, while it runs or waits for an
answer). The events one read of the worker delivers are journaled in one
transaction and wake stream subscribers at once. Requests reach the journal
through :meth:`JobManager.read`, off the event loop.


Why one module of this size: a job's life is one state machine (queued,
starting, running, waiting for input, terminal) whose transitions race with
cancellation; keeping every transition next to the others is what makes
"the first conclusion wins" and "a cancel in any state takes effect" easy
to check. Spawning and reading a worker live in ``worker_process``, stream
wake-ups in ``wakeups``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeGuard, TypeVar

from sparkrun.core.events import Event
from sparkrun.core.operation import new_operation_id
from sparkrun.core.processes import ProcessIdentity, signal_group
from sparkrun.core.redaction import Redactor
from sparkrun.daemon.journal import TERMINAL_STATES, JobRecord, Journal, UnknownJob
from sparkrun.daemon.operations import find_operation
from sparkrun.daemon.wakeups import Wakeups
from sparkrun.daemon.worker import MAX_ERROR_CHARS
from sparkrun.daemon.worker_process import WorkerProcess, event_of
from sparkrun.errors import SparkrunError

__all__ = ["JobConflict", "JobManager", "JobObserver", "PromptError"]

_log = logging.getLogger(__name__)
_CANCEL_GRACE_SECONDS = 3.0
_PROMPT_KINDS = ("confirm", "choice", "secret")
_T = TypeVar("_T")


class JobConflict(SparkrunError):
    """The request does not fit the job's state (e.g. cancelling a finished job)."""


class PromptError(SparkrunError):
    """No such prompt, or an answer that does not fit it."""


class JobObserver(Protocol):
    """Sees every job's start, journaled events and end (the daemon's metrics)."""

    def job_started(self, operation_id: str, operation: str, started_at: float) -> None: ...

    def job_events(self, operation_id: str, events: list[Event]) -> None: ...

    def job_finished(self, operation_id: str, state: str, finished_at: float) -> None: ...


@dataclass
class _Job:
    """What the daemon holds for one job that is not terminal yet."""

    redactor: Redactor = field(default_factory=Redactor)  # the daemon is the last gate for secrets
    worker: WorkerProcess | None = None
    prompts: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancelled: bool = False
    outcome: tuple[str, Any] | None = None  # ("result", value) or ("error", {...})
    timing: dict[str, float] = field(default_factory=dict)  # the operation's own start and end, from its worker
    done: asyncio.Event = field(default_factory=asyncio.Event)
    cancel_grace: float = _CANCEL_GRACE_SECONDS  # the operation's: SIGTERM to SIGKILL on cancel

    def cancel_arrived(self) -> bool:
        """Whether the job is cancelled, asked anew after an ``await`` (``cancel`` may have run meanwhile).

        A call, unlike a second read of ``cancelled``, is not taken by the type checker for the
        check made before the ``await``.
        """
        return self.cancelled


def _error(kind: str, message: str) -> dict[str, str]:
    return {"type": kind, "message": message}


class JobManager:
    """Owns every job of this daemon; all methods run on the event loop."""

    def __init__(self, journal: Journal, state_dir: Path, *, max_workers: int = 4, plugins: list[str] | None = None):
        self.journal = journal
        self.state_dir = state_dir
        self.max_workers = max_workers
        self.plugins = list(plugins or [])
        self._jobs: dict[str, _Job] = {}
        self._slots = 0  # jobs started or starting: counted before the worker is spawned
        self._closing = False
        self._queue: deque[str] = deque()
        self._tasks: set[asyncio.Task[None]] = set()
        self.wakeups = Wakeups()
        self.worker_logs = state_dir / "daemon" / "workers"
        self.observers: list[JobObserver] = []

    async def read(self, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Run a journal read in a thread, so a slow disk never stalls the event loop."""
        return await asyncio.to_thread(call, *args, **kwargs)

    # -- recovery -------------------------------------------------------------------

    def recover(self) -> list[str]:
        """Mark jobs a previous daemon left unfinished as ``lost``, ending a stray worker that is provably ours."""
        lost = []
        for job in self.journal.jobs(limit=100_000, states=("queued", "running", "waiting_input")):
            identity = ProcessIdentity.from_json(job.worker)
            if identity is not None and signal_group(identity, signal.SIGKILL):
                _log.warning("job %s: ended the worker a previous daemon left (pid %d)", job.job_id, identity.pid)
            elif job.worker_pid:
                _log.warning(
                    "job %s: its worker (pid %d) is gone or not provably ours; not signalled",
                    job.job_id,
                    job.worker_pid,
                )
            error = _error("WorkerLost", "the daemon restarted while this job was unfinished")
            self.journal.update_job(job.job_id, state="lost", finished_at=time.time(), error=error)
            lost.append(job.job_id)
        return lost

    # -- submission -----------------------------------------------------------------

    async def submit(self, operation: Any, arguments: Any) -> JobRecord:
        """Validate and queue a job; raises ValueError / UnknownOperation for bad input."""
        definition = find_operation(operation)
        checked = definition.validate({} if arguments is None else arguments)
        job = await self.read(self.journal.create_job, uuid.uuid4().hex, definition.name, checked, new_operation_id())
        self._jobs[job.job_id] = _Job(cancel_grace=definition.cancel_grace_seconds)
        self._queue.append(job.job_id)
        self._start_queued()
        return job

    def _start_queued(self) -> None:
        while self._queue and self._slots < self.max_workers and not self._closing:
            job_id = self._queue.popleft()
            self._slots += 1
            task = asyncio.get_running_loop().create_task(self._run(job_id))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, job_id: str) -> None:
        try:
            await self._run_worker(job_id)
        finally:
            self._slots -= 1
            self._start_queued()

    async def _run_worker(self, job_id: str) -> None:
        entry = self._jobs.get(job_id)
        job = self.journal.job(job_id)
        if entry is None or entry.cancelled or job is None or job.state != "queued":
            return
        try:
            worker = await WorkerProcess.spawn(entry.redactor)
        except OSError as error:
            self._finish(job_id, "failed", error=_error(type(error).__name__, str(error)))
            return
        entry.worker = worker
        if entry.cancel_arrived():  # cancelled while the worker was starting; the job is already recorded as cancelled
            await worker.terminate(0)
            await worker.wait()
            return
        started = time.time()
        self.journal.update_job(
            job_id, state="running", started_at=started, worker_pid=worker.pid, worker=worker.identity.to_json()
        )
        self._notify(lambda observer: observer.job_started(job.operation_id, job.operation, started))
        log_task = asyncio.get_running_loop().create_task(worker.copy_log(self.worker_logs / f"{job_id}.log"))
        spec = {
            "job_id": job_id,
            "operation": job.operation,
            "arguments": job.arguments,
            "operation_id": job.operation_id,
            "state_dir": str(self.state_dir),
            "plugins": self.plugins,
        }
        try:
            await worker.send(spec)
            async for messages in worker.messages():
                self._take(job_id, entry, messages)
        except Exception as error:  # whatever breaks the reading concludes the job; it never orphans it
            _log.warning("job %s: reading its worker failed: %s", job_id, error)
            if entry.outcome is None or entry.outcome[0] != "error":
                entry.outcome = ("error", _error("WorkerError", f"the daemon could not read the worker: {error}"))
            await worker.terminate(_CANCEL_GRACE_SECONDS)
        finally:
            code = await worker.wait()
            try:
                await log_task
            except Exception as error:
                _log.warning("job %s: copying its worker log failed: %s", job_id, error)
            self._conclude(job_id, entry, code)

    def _take(self, job_id: str, entry: _Job, messages: list[dict[str, Any]]) -> None:
        events: list[Event] = []
        for message in messages:
            kind = message["kind"]
            if kind == "event":
                event = event_of(message)
                if event is not None:
                    events.append(entry.redactor(event))
                continue
            if events:  # keep journal order: flush events before acting on anything else
                self._append(job_id, events)
                events = []
            if kind == "prompt":
                self._ask(job_id, entry, message.get("prompt"))
            elif kind in ("result", "error"):
                entry.outcome = (kind, self._outcome_value(kind, entry.redactor.value(message.get(kind))))
                entry.timing = _timing(message.get("operation"))
        if events:
            self._append(job_id, events)

    @staticmethod
    def _outcome_value(kind: str, value: Any) -> Any:
        if kind == "result":
            return value
        if not isinstance(value, dict):
            return _error("WorkerError", "the worker reported an error without details")
        message = str(value.get("message") or "")
        if len(message) > MAX_ERROR_CHARS:
            message = message[: MAX_ERROR_CHARS - 1] + "…"
        return _error(str(value.get("type") or "Error")[:200], message)

    def _append(self, job_id: str, events: list[Event]) -> None:
        self.journal.append_many(job_id, events)
        self.wakeups.wake(job_id)
        if self.observers:
            operation_id = events[0]["operation_id"]
            self._notify(lambda observer: observer.job_events(operation_id, events))

    def _notify(self, call: Callable[[JobObserver], object]) -> None:
        for observer in self.observers:
            try:
                call(observer)
            except Exception:
                _log.warning("job observer %r failed", observer, exc_info=True)

    def _conclude(self, job_id: str, entry: _Job, code: int) -> None:
        if entry.cancelled:
            self._finish(job_id, "cancelled", error=_error("Cancelled", "cancelled by request"), **entry.timing)
        elif entry.outcome and entry.outcome[0] == "result":
            self._finish(job_id, "succeeded", result=entry.outcome[1], **entry.timing)
        elif entry.outcome:
            self._finish(job_id, "failed", error=entry.outcome[1], **entry.timing)
        else:
            message = f"the worker exited with code {code} before reporting an outcome"
            self._finish(job_id, "failed", error=_error("WorkerExited", message))

    def _finish(self, job_id: str, state: str, **fields: Any) -> None:
        """Record the job's terminal state, once: the first conclusion wins."""
        entry = self._jobs.pop(job_id, None)
        if entry is None:
            return
        finished = time.time()
        try:
            job = self.journal.update_job(job_id, state=state, finished_at=finished, **fields)
        except ValueError as error:  # e.g. a result that is not strict JSON after all
            fields = {"error": _error("ResultError", str(error))}
            job = self.journal.update_job(job_id, state="failed", finished_at=finished, **fields)
        entry.done.set()
        self.wakeups.wake(job_id)
        if job.started_at is not None:
            self._notify(lambda observer: observer.job_finished(job.operation_id, job.state, finished))

    # -- prompts --------------------------------------------------------------------

    def _ask(self, job_id: str, entry: _Job, prompt: Any) -> None:
        if not isinstance(prompt, dict) or prompt.get("kind") not in _PROMPT_KINDS:
            _log.warning("job %s: malformed prompt dropped", job_id)
            return
        prompt_id, question, choices = prompt.get("prompt_id"), prompt.get("question"), prompt.get("choices")
        if not (isinstance(prompt_id, str) and 0 < len(prompt_id) <= 64 and isinstance(question, str)):
            _log.warning("job %s: malformed prompt dropped", job_id)
            return
        if choices is not None and not (isinstance(choices, list) and all(isinstance(c, str) for c in choices)):
            _log.warning("job %s: malformed prompt dropped", job_id)
            return
        shown = entry.redactor.value({"question": question[:4096], "choices": choices})
        entry.prompts[prompt_id] = {"prompt_id": prompt_id, "kind": prompt["kind"], **shown}
        self.journal.update_job(job_id, state="waiting_input")
        self.wakeups.wake(job_id)

    def prompts(self, job_id: str) -> list[dict[str, Any]]:
        entry = self._jobs.get(job_id)
        return list(entry.prompts.values()) if entry else []

    async def answer(self, job_id: str, prompt_id: str, value: Any) -> None:
        """Check an answer against its prompt and hand it to the worker (never stored or logged)."""
        entry = self._jobs.get(job_id)
        prompt = entry.prompts.get(prompt_id) if entry else None
        if entry is None or prompt is None or entry.worker is None:
            raise PromptError(f"no pending prompt with this id (job_id={job_id}, prompt_id={prompt_id[:80]!r})")
        kind = prompt["kind"]
        if kind == "confirm" and not isinstance(value, bool):
            raise ValueError(f"answer to a confirm prompt must be true or false, not {type(value).__name__}")
        if kind == "choice" and value not in (prompt.get("choices") or []):
            raise ValueError(f"answer must be one of {', '.join(prompt['choices'])} (answer={value!r:.60})")
        if kind == "secret" and (not isinstance(value, str) or not value):
            raise ValueError("answer to a secret prompt must be a non-empty string")
        del entry.prompts[prompt_id]
        if kind == "secret":
            entry.redactor.add(value)
        await entry.worker.send({"answer": {"prompt_id": prompt_id, "value": value}})
        if not entry.prompts and job_id in self._jobs:  # on the loop: the job cannot have finished meanwhile
            self.journal.update_job(job_id, state="running")
            self.wakeups.wake(job_id)

    # -- cancellation ---------------------------------------------------------------

    async def cancel(self, job_id: str) -> JobRecord:
        """Cancel a job in any non-terminal state; returns its record once the cancel took effect."""
        job = await self.read(self.journal.job, job_id)
        if job is None:
            raise UnknownJob(job_id)
        if job.state in TERMINAL_STATES:
            raise JobConflict(f"the job is already finished (job_id={job_id}, state={job.state})")
        entry = self._jobs.get(job_id)
        if entry is None:  # unfinished in the journal but not this daemon's: nothing runs it
            await self.read(
                self.journal.update_job, job_id, state="cancelled", finished_at=time.time(), error=_cancelled()
            )
        elif entry.worker is None:  # queued, or its worker is still starting (see _run_worker)
            entry.cancelled = True
            if job_id in self._queue:
                self._queue.remove(job_id)
            self._finish(job_id, "cancelled", error=_cancelled("cancelled before it started"))
        else:
            entry.cancelled = True
            # the worker winds the job down (a ColdSnap controller may take minutes): answer within 15 s,
            # with the job still running if it has not finished by then; SIGKILL follows after its grace
            terminate = asyncio.get_running_loop().create_task(entry.worker.terminate(entry.cancel_grace))
            self._tasks.add(terminate)
            terminate.add_done_callback(self._tasks.discard)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(entry.done.wait(), 15)
        return await self.read(self.journal.job, job_id) or job

    async def shutdown(self) -> None:
        """Stop every worker (the daemon is exiting); running and queued jobs end as cancelled."""
        self._closing = True
        self.wakeups.wake_all()  # every stream ends instead of waiting
        for job_id, entry in list(self._jobs.items()):
            entry.cancelled = True
            if entry.worker is None:
                self._queue.clear()
                self._finish(job_id, "cancelled", error=_cancelled("the daemon stopped"))
        await asyncio.gather(
            *(entry.worker.terminate(_CANCEL_GRACE_SECONDS) for entry in self._jobs.values() if entry.worker)
        )
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=10)

    @property
    def closing(self) -> bool:
        """Whether the daemon is shutting down (streams end instead of waiting)."""
        return self._closing


def _cancelled(message: str = "cancelled by request") -> dict[str, str]:
    return _error("Cancelled", message)


def _timing(value: Any) -> dict[str, float]:
    """The journal columns for the operation times a worker reported; nothing if they are not two numbers."""
    if not isinstance(value, dict):
        return {}
    started, finished = value.get("started_at"), value.get("finished_at")
    if not (_is_number(started) and _is_number(finished)):
        return {}
    return {"operation_started_at": float(started), "operation_finished_at": float(finished)}


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
