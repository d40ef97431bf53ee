"""The milestones of a benchmark run, for the operation's subscribers and for a direct callback.

Milestones (``schedule_started`` ... ``run_complete``) are ``type: "benchmark"``
events delivered to the operation, and handed to the callback too; the
callback also gets every attempt envelope as ``task_progress`` (the
operation already delivered that envelope: it is never sent twice). A
callback that raises is logged, never fails the run it watches.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sparkrun.core.legacy_events import benchmark_event
from sparkrun.feedback import FeedbackEvent

__all__ = ["BenchmarkCallback", "RunEvents"]

BenchmarkCallback = Callable[[dict[str, Any]], Any]
_log = logging.getLogger(__name__)


class RunEvents:
    """The events of one run (``benchmark_id``)."""

    def __init__(self, benchmark_id: str, callback: BenchmarkCallback | None) -> None:
        self.benchmark_id, self._callback = benchmark_id, callback

    def milestone(self, kind: str, message: str, **fields: Any) -> None:
        self._call(dict(benchmark_event(kind, self.benchmark_id, message, **fields)))

    def progress(self, index: int, envelope: FeedbackEvent) -> None:
        if self._callback is not None:
            self._call(
                {"kind": "task_progress", "benchmark_id": self.benchmark_id, "index": index, "feedback": dict(envelope)}
            )

    def _call(self, event: dict[str, Any]) -> None:
        if self._callback is None:
            return
        try:
            self._callback(event)
        except Exception:  # a caller's callback never breaks the run it watches
            _log.exception("the benchmark callback failed")
