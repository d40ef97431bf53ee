"""Waking event-stream subscribers when their job writes or changes state.

A subscriber registers a future before it reads the journal, so no write can
slip between its read and its wait; every write resolves the futures of that
job at once (no polling).
"""

from __future__ import annotations

import asyncio

__all__ = ["Wakeups"]


class Wakeups:
    """Per-job futures resolved at the job's next write; used on the event loop only."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}

    def waiter(self, job_id: str) -> asyncio.Future[None]:
        """A future resolved at the next write or state change of ``job_id``."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(job_id, set()).add(future)
        future.add_done_callback(lambda done: self._waiters.get(job_id, set()).discard(done))
        return future

    def wake(self, job_id: str) -> None:
        for future in list(self._waiters.pop(job_id, ())):
            if not future.done():
                future.set_result(None)

    def wake_all(self) -> None:
        for job_id in list(self._waiters):
            self.wake(job_id)
