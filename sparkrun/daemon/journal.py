"""The daemon's job journal: jobs and their bounded, per-job event sequences in SQLite.

Every event a worker reports is journaled once with a per-job sequence (1, 2, 3 ...)
that SSE clients use as their cursor. Each job keeps at most ``max_events`` events and
``max_event_bytes`` of encoded JSON, oldest dropped first, so a chatty job cannot fill
the disk. Appends must stay fast as a job grows, so the bounds bookkeeping lives in
memory (rebuilt from one indexed query after a restart) and an append never rescans a
job's events. One connection in WAL mode with ``synchronous=NORMAL`` makes every
committed append survive ``kill -9`` of the daemon.

Why one module of this size: the journal is one class around one SQLite
connection and one lock, and its invariants (sequences without gaps, the
bounds, the in-memory counters matching the table) hold across all of its
methods; split, they would have to be re-established at each seam.
"""

from __future__ import annotations

import json
import math
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from sparkrun.core import strict_json
from sparkrun.core.events import Event
from sparkrun.errors import SparkrunError

__all__ = [
    "LISTED_FIELDS",
    "STATES",
    "TERMINAL_STATES",
    "CursorExpired",
    "JobRecord",
    "Journal",
    "JournalUnreadable",
    "UnknownJob",
]

TERMINAL_STATES = ("succeeded", "failed", "cancelled", "lost")
STATES = ("queued", "running", "waiting_input", *TERMINAL_STATES)

_UPDATABLE = (
    "state",
    "started_at",
    "finished_at",
    "result",
    "error",
    "worker_pid",
    "worker",
    "operation_started_at",
    "operation_finished_at",
)
_JSON_COLUMNS = ("arguments", "result", "error", "worker")
#: Columns added since the first release, with their types (a journal created earlier gains them at open).
_ADDED_COLUMNS = {"worker": "JSON", "operation_started_at": "REAL", "operation_finished_at": "REAL"}
#: What a job listing shows: no arguments or result, which may each be large.
LISTED_FIELDS = (
    "job_id",
    "operation",
    "operation_id",
    "state",
    "created_at",
    "started_at",
    "finished_at",
    "error",
    "worker_pid",
    "first_retained",
    "last_seq",
)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    job_id TEXT PRIMARY KEY, operation TEXT NOT NULL, arguments JSON NOT NULL,
    operation_id TEXT NOT NULL, state TEXT NOT NULL, created_at REAL NOT NULL,
    started_at REAL, finished_at REAL, result JSON, error JSON, worker_pid INTEGER, worker JSON,
    operation_started_at REAL, operation_finished_at REAL
);
CREATE TABLE IF NOT EXISTS events (
    job_id TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
"""

# first_retained / last_seq come from the events primary key (two O(log n) lookups), so
# listing jobs never needs their in-memory counters.
_SELECT_JOB = """
SELECT j.*,
       (SELECT MIN(seq) FROM events e WHERE e.job_id = j.job_id) AS first_seq,
       (SELECT MAX(seq) FROM events e WHERE e.job_id = j.job_id) AS last_seq
FROM jobs j
"""


class CursorExpired(SparkrunError):
    """The events after a reader's cursor were trimmed; it can resume from ``first_retained``."""

    def __init__(self, first_retained: int, *, job_id: str | None = None, after: int | None = None) -> None:
        super().__init__(
            f"cursor expired: events after it were trimmed (job_id={job_id}, after={after}, "
            f"first_retained={first_retained})"
        )
        self.first_retained = first_retained
        self.job_id = job_id
        self.after = after


class JournalUnreadable(SparkrunError):
    """The journal file is not a usable SQLite database (corrupt, or not a journal at all)."""

    def __init__(self, path: Path, error: Exception) -> None:
        super().__init__(
            f"the job journal is unreadable (path={path}, {error}); "
            "move it aside to start the daemon with an empty journal"
        )
        self.path = path


class UnknownJob(SparkrunError):
    """No job with this id is in the journal (never created, or pruned)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"unknown job (job_id={job_id})")
        self.job_id = job_id


@dataclass(frozen=True)
class JobRecord:
    """A snapshot of one job row plus the bounds of its retained events."""

    job_id: str
    operation: str
    arguments: dict[str, Any]
    operation_id: str
    state: str
    created_at: float
    started_at: float | None
    finished_at: float | None
    result: Any | None
    error: dict[str, Any] | None
    worker_pid: int | None
    first_retained: int
    last_seq: int
    #: The worker's :class:`~sparkrun.core.processes.ProcessIdentity`, as recorded at spawn.
    worker: dict[str, Any] | None = None
    #: When the job's operation itself began and ended in its worker (its trace's root span), if it ran.
    operation_started_at: float | None = None
    operation_finished_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """All fields but the worker's identity as a JSON-ready dict (the API's job representation)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "worker"}

    def summary(self) -> dict[str, Any]:
        """The fields a job listing shows (small whatever the job's arguments or result)."""
        return {name: getattr(self, name) for name in LISTED_FIELDS}


class _Counters:
    """In-memory bounds state of one job, so an append costs O(events appended)."""

    __slots__ = ("next_seq", "retained", "size")

    def __init__(self, rows: Iterable[tuple[int, int]]) -> None:
        self.retained: deque[tuple[int, int]] = deque(rows)  # (seq, encoded size), oldest first
        self.size = sum(size for _, size in self.retained)
        self.next_seq = self.retained[-1][0] + 1 if self.retained else 1

    @property
    def first_retained(self) -> int:
        return self.retained[0][0] if self.retained else self.next_seq


class Journal:
    """Jobs and their bounded event sequences in one SQLite file; safe to share across threads."""

    def __init__(self, path: Path, *, max_events: int = 10_000, max_event_bytes: int = 16 * 2**20) -> None:
        if max_events < 1 or max_event_bytes < 1:
            raise ValueError(f"journal bounds must be positive (max_events={max_events}, bytes={max_event_bytes})")
        self.path = Path(path)
        self.max_events = max_events
        self.max_event_bytes = max_event_bytes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._counters: dict[str, _Counters] = {}
        #: Events written and events dropped by the bounds since this journal was opened (for metrics).
        self.appended_total = 0
        self.trimmed_total = 0
        # Autocommit mode: transactions are explicit, so each append is exactly one commit.
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        try:
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            # A checkpoint stalls the writer on two fsyncs; every 4000 pages (~16 MB of WAL)
            # instead of 1000 pays them a quarter as often and merges repeated page writes.
            self._db.execute("PRAGMA wal_autocheckpoint=4000")
            self._db.execute("PRAGMA busy_timeout=5000")
            self._db.executescript(_SCHEMA)
            present = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
            for column, kind in _ADDED_COLUMNS.items():
                if column not in present:
                    self._db.execute(f"ALTER TABLE jobs ADD COLUMN {column} {kind}")
        except sqlite3.DatabaseError as error:
            self._db.close()
            raise JournalUnreadable(self.path, error) from None

    def create_job(self, job_id: str, operation: str, arguments: dict[str, Any], operation_id: str) -> JobRecord:
        """Record a new job in state ``queued``; a duplicate id is a ``ValueError``."""
        if not isinstance(arguments, dict):
            raise TypeError(f"arguments must be a dict, not {type(arguments).__name__}")
        with self._lock:
            try:
                with self._transaction():
                    self._db.execute(
                        "INSERT INTO jobs (job_id, operation, arguments, operation_id, state, created_at)"
                        " VALUES (?, ?, ?, ?, 'queued', ?)",
                        (job_id, operation, _encode(arguments), operation_id, time.time()),
                    )
            except sqlite3.IntegrityError:
                raise ValueError(f"job already exists (job_id={job_id})") from None
            self._counters[job_id] = _Counters(())
            record = self._job(job_id)
        if record is None:  # inserted just above, under the same lock
            raise UnknownJob(job_id)
        return record

    def update_job(self, job_id: str, **changes: Any) -> JobRecord:
        """Change the mutable fields of a job (state, times, result, error, worker pid)."""
        unknown = sorted(set(changes) - set(_UPDATABLE))
        if unknown:
            raise ValueError(f"unknown job field (field={unknown[0]}, allowed={', '.join(_UPDATABLE)})")
        if "state" in changes and changes["state"] not in STATES:
            raise ValueError(f"unknown job state (state={changes['state']}, allowed={', '.join(STATES)})")
        if changes.get("error") is not None and not isinstance(changes["error"], dict):
            raise ValueError(f"error must be a dict with type and message (error={changes['error']!r})")
        values = [_encode(v) if k in _JSON_COLUMNS and v is not None else v for k, v in changes.items()]
        with self._lock:
            if changes:
                with self._transaction():
                    assignments = ", ".join(f"{name} = ?" for name in changes)
                    cursor = self._db.execute(f"UPDATE jobs SET {assignments} WHERE job_id = ?", (*values, job_id))
                    if cursor.rowcount == 0:
                        raise UnknownJob(job_id)
                if changes.get("state") in TERMINAL_STATES:
                    # A finished job rarely gets more events; its deque would only hold memory.
                    self._counters.pop(job_id, None)
            record = self._job(job_id)
        if record is None:
            raise UnknownJob(job_id)
        return record

    def job(self, job_id: str) -> JobRecord | None:
        """The job's current record, or ``None`` if there is no such job."""
        with self._lock:
            return self._job(job_id)

    def jobs(self, *, limit: int = 100, states: Iterable[str] | None = None) -> list[JobRecord]:
        """Up to ``limit`` jobs, newest first, optionally only those in ``states``."""
        query, params = _SELECT_JOB, []
        if states is not None:
            wanted = list(states)
            bad = [s for s in wanted if s not in STATES]
            if bad:
                raise ValueError(f"unknown job state (state={bad[0]}, allowed={', '.join(STATES)})")
            query += f" WHERE j.state IN ({', '.join('?' * len(wanted))})"
            params.extend(wanted)
        query += " ORDER BY j.created_at DESC, j.rowid DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(query, (*params, limit)).fetchall()
        return [_record(row) for row in rows]

    def prune(self, *, keep_finished: int = 200, older_than: float | None = None) -> int:
        """Delete terminal jobs beyond the newest ``keep_finished`` (or finished more than
        ``older_than`` seconds ago) together with their events; returns how many went."""
        terminal = ", ".join("?" * len(TERMINAL_STATES))
        query = (
            f"SELECT job_id, finished_at FROM jobs WHERE state IN ({terminal})"
            " ORDER BY COALESCE(finished_at, created_at) DESC, rowid DESC"
        )
        cutoff = None if older_than is None else time.time() - older_than
        with self._lock:
            rows = self._db.execute(query, TERMINAL_STATES).fetchall()
            doomed = [
                row["job_id"]
                for index, row in enumerate(rows)
                if index >= keep_finished or (cutoff is not None and (row["finished_at"] or 0.0) < cutoff)
            ]
            if doomed:
                with self._transaction():
                    self._db.executemany("DELETE FROM events WHERE job_id = ?", [(j,) for j in doomed])
                    self._db.executemany("DELETE FROM jobs WHERE job_id = ?", [(j,) for j in doomed])
                for job_id in doomed:
                    self._counters.pop(job_id, None)
        return len(doomed)

    def append(self, job_id: str, event: Event) -> int:
        """Journal one event and return its sequence number."""
        return self.append_many(job_id, (event,))[0]

    def append_many(self, job_id: str, events: Sequence[Event]) -> list[int]:
        """Journal several events in one transaction (one commit) and return their sequences."""
        for event in events:
            if not isinstance(event, dict):
                raise TypeError(f"event must be a dict, not {type(event).__name__}")
        bodies = [_encode(event) for event in events]
        if not bodies:
            return []
        with self._lock:
            counters = self._load_counters(job_id)
            try:
                return self._write(job_id, counters, bodies)
            except BaseException:
                # Memory may be ahead of the rolled-back database; rebuild it on next use.
                self._counters.pop(job_id, None)
                raise

    def read(self, job_id: str, *, after: int = 0, limit: int = 1000) -> list[tuple[int, str]]:
        """Up to ``limit`` retained events with seq > ``after`` as (seq, JSON text), ascending.

        Raises :class:`CursorExpired` when events after the cursor were already trimmed,
        so a reader learns it missed something instead of silently skipping it.
        """
        if after < 0 or limit < 0:
            raise ValueError(f"cursor and limit must not be negative (after={after}, limit={limit})")
        with self._lock:
            counters = self._counters.get(job_id)
            if counters is not None:
                first_retained = counters.first_retained
            else:
                row = self._db.execute(
                    "SELECT (SELECT MIN(seq) FROM events WHERE job_id = ?) FROM jobs WHERE job_id = ?",
                    (job_id, job_id),
                ).fetchone()
                if row is None:
                    raise UnknownJob(job_id)
                first_retained = row[0] if row[0] is not None else 1
            if after < first_retained - 1:
                raise CursorExpired(first_retained, job_id=job_id, after=after)
            rows = self._db.execute(
                "SELECT seq, body FROM events WHERE job_id = ? AND seq > ? ORDER BY seq LIMIT ?",
                (job_id, after, limit),
            ).fetchall()
        return [(row[0], row[1]) for row in rows]

    def close(self) -> None:
        """Close the database connection; the journal is unusable afterwards."""
        with self._lock:
            self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._db.execute("BEGIN")
        try:
            yield
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:  # SQLite may have rolled back already (e.g. disk full)
                self._db.execute("ROLLBACK")
            raise

    def _job(self, job_id: str) -> JobRecord | None:
        row = self._db.execute(_SELECT_JOB + " WHERE j.job_id = ?", (job_id,)).fetchone()
        return None if row is None else _record(row)

    def _load_counters(self, job_id: str) -> _Counters:
        """The job's counters, rebuilt from its retained events the first time it is touched."""
        counters = self._counters.get(job_id)
        if counters is None:
            rows = self._db.execute(
                "SELECT seq, length(CAST(body AS BLOB)) FROM events WHERE job_id = ? ORDER BY seq", (job_id,)
            ).fetchall()
            if not rows and self._db.execute("SELECT 1 FROM jobs WHERE job_id = ?", (job_id,)).fetchone() is None:
                raise UnknownJob(job_id)
            counters = self._counters[job_id] = _Counters(tuple(row) for row in rows)
        return counters

    def _write(self, job_id: str, counters: _Counters, bodies: list[str]) -> list[int]:
        """Assign sequences, trim to the bounds, and commit the inserts with at most one DELETE."""
        retained = counters.retained
        first_before = counters.first_retained
        start = seq = counters.next_seq
        for body in bodies:
            size = len(body.encode())
            retained.append((seq, size))
            counters.size += size
            seq += 1
        counters.next_seq = seq
        # Oldest first; the newest event always stays, even alone above the byte bound.
        for _ in range(len(retained) - self.max_events):
            counters.size -= retained.popleft()[1]
        while counters.size > self.max_event_bytes and len(retained) > 1:
            counters.size -= retained.popleft()[1]
        first = retained[0][0]
        # Events trimmed within this very batch are never written at all.
        rows = [(job_id, n, body) for n, body in enumerate(bodies, start) if n >= first]
        with self._transaction():
            if first > first_before:
                self._db.execute("DELETE FROM events WHERE job_id = ? AND seq < ?", (job_id, first))
            self._db.executemany("INSERT INTO events (job_id, seq, body) VALUES (?, ?, ?)", rows)
        self.appended_total += len(bodies)
        self.trimmed_total += first - first_before
        return list(range(start, seq))

    def count_by_state(self) -> dict[str, int]:
        """How many jobs are in each state."""
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        return {state: count for state, count in rows}


# One shared encoder: json.dumps() with separators builds a new encoder on every call. Only strict
# JSON is stored (ASCII, finite numbers), so whatever a job holds, every client can read it back.
_encode = strict_json.dumps


def _loaded(text: str) -> Any:
    """A stored JSON column; anything a journal of an earlier version let in is made readable."""
    try:
        return strict_json.made_safe(json.loads(text))
    except ValueError:
        pass
    try:
        return strict_json.made_safe(json.loads(text, parse_constant=lambda name: None, parse_float=_finite_or_none))
    except ValueError as error:
        return {"unreadable": f"this value could not be read back as strict JSON ({error})"}


def _finite_or_none(text: str) -> float | None:
    number = float(text)
    return number if math.isfinite(number) else None


def _record(row: sqlite3.Row) -> JobRecord:
    data = dict(row)
    for column in _JSON_COLUMNS:
        if data[column] is not None:
            data[column] = _loaded(data[column])
    first_seq, data["last_seq"] = data.pop("first_seq"), data["last_seq"] or 0
    data["first_retained"] = first_seq if first_seq is not None else data["last_seq"] + 1
    return JobRecord(**data)
