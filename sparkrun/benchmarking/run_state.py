"""A benchmark run on disk: its definition, its progress, its sessions, its lock.

``<state_dir>/benchmarks/<benchmark_id>/`` holds ``run.json`` (what to run
and how far it got: completed and failed task indices, attempts, sessions,
crashes), ``lock`` (held with ``flock`` by the process running it, so a lock
is stale exactly when its holder is gone), per task ``tasks/<index>/`` with
each attempt's directory (result file, log) and ``result.json`` (the last
attempt's outcome), and ``results.json`` (every task's, consolidated).
Files are replaced atomically, so a crash never leaves half a file.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from sparkrun.errors import BenchmarkError

__all__ = ["RUN_ID", "RunState", "RunStore", "Session"]

RUN_ID = re.compile(r"bench_[0-9a-f]{12}")
SESSION_STATUSES = ("running", "completed", "partial", "interrupted", "crashed")


@dataclass
class Session:
    """One invocation of ``run`` or ``resume`` on a run."""

    started_at: float
    operation_id: str
    pid: int
    status: str = "running"
    ended_at: float | None = None


@dataclass
class RunState:
    """Everything ``run.json`` records."""

    benchmark_id: str
    framework: str
    requirement: str | None
    title: str
    target: dict[str, Any]
    arguments: dict[str, Any]
    schedule: dict[str, Any]
    tasks: list[dict[str, Any]]
    task_timeout: float
    exit_on_first_failure: bool
    created_at: float
    version: str = ""
    completed: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)  # task index (as text: JSON keys) -> attempts made
    sessions: list[Session] = field(default_factory=list)
    crashes: int = 0

    @property
    def pending(self) -> list[int]:
        done = set(self.completed) | set(self.failed)
        return [task["index"] for task in self.tasks if task["index"] not in done]

    @property
    def status(self) -> str:
        """The latest session's status, or ``new``."""
        return self.sessions[-1].status if self.sessions else "new"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        sessions = [Session(**session) for session in data.pop("sessions", [])]
        return cls(**data, sessions=sessions)


def _write_atomically(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    temporary.replace(path)


class RunStore:
    """The runs under ``<state_dir>/benchmarks``."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "benchmarks"

    def directory(self, benchmark_id: str) -> Path:
        if not RUN_ID.fullmatch(benchmark_id):
            raise BenchmarkError(f"benchmark id is {benchmark_id!r}; ids look like bench_ and 12 hex digits")
        return self.root / benchmark_id

    def task_directory(self, benchmark_id: str, index: int) -> Path:
        return self.directory(benchmark_id) / "tasks" / str(index)

    def exists(self, benchmark_id: str) -> bool:
        return (self.directory(benchmark_id) / "run.json").is_file()

    def load(self, benchmark_id: str) -> RunState:
        path = self.directory(benchmark_id) / "run.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            state = RunState.from_json(data)
        except FileNotFoundError:
            known = ", ".join(self.ids()[:5]) or "none"
            raise BenchmarkError(
                f"no benchmark run with this id (benchmark_id={benchmark_id}, recent: {known})"
            ) from None
        except (OSError, ValueError, TypeError) as error:
            raise BenchmarkError(f"the run's state cannot be read ({path}): {error}") from None
        return self._settle_crash(state)

    def save(self, state: RunState) -> None:
        _write_atomically(self.directory(state.benchmark_id) / "run.json", state.to_json())

    def save_task_result(self, benchmark_id: str, index: int, result: dict[str, Any]) -> None:
        _write_atomically(self.task_directory(benchmark_id, index) / "result.json", result)

    def task_results(self, state: RunState) -> list[dict[str, Any]]:
        """The last outcome of every task that has one, in task order."""
        found = []
        for task in state.tasks:
            path = self.task_directory(state.benchmark_id, task["index"]) / "result.json"
            with contextlib.suppress(OSError, ValueError):
                found.append(json.loads(path.read_text(encoding="utf-8")))
        return found

    def save_results(self, state: RunState, results: dict[str, Any]) -> None:
        _write_atomically(self.directory(state.benchmark_id) / "results.json", results)

    def ids(self) -> list[str]:
        """Run ids, most recently changed first."""
        if not self.root.is_dir():
            return []
        runs = [p for p in self.root.iterdir() if RUN_ID.fullmatch(p.name) and (p / "run.json").is_file()]
        runs.sort(key=lambda p: (p / "run.json").stat().st_mtime, reverse=True)
        return [p.name for p in runs]

    def running(self, benchmark_id: str) -> bool:
        """Whether a live process holds the run's lock."""
        path = self.directory(benchmark_id) / "lock"
        try:
            with open(path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        return False

    @contextlib.contextmanager
    def locked(self, benchmark_id: str) -> Iterator[IO[str]]:
        """Hold the run's lock for the block; a run already held is an error naming its holder."""
        directory = self.directory(benchmark_id)
        directory.mkdir(parents=True, exist_ok=True)
        lock = open(directory / "lock", "a+")  # noqa: SIM115 - held for the block, closed below
        try:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                lock.seek(0)
                holder = lock.read().strip() or "another process"
                raise BenchmarkError(
                    f"the run is already running (benchmark_id={benchmark_id}, held by pid {holder})"
                ) from None
            lock.seek(0)
            lock.truncate()
            lock.write(str(os.getpid()))
            lock.flush()
            yield lock
        finally:
            lock.close()  # releases the lock

    def _settle_crash(self, state: RunState) -> RunState:
        """A session still ``running`` whose lock nobody holds crashed: record it once."""
        if state.sessions and state.sessions[-1].status == "running" and not self.running(state.benchmark_id):
            state.sessions[-1].status = "crashed"
            state.sessions[-1].ended_at = time.time()
            state.crashes += 1
            self.save(state)
        return state
