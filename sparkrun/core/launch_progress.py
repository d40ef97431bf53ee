"""The launch phase tracker: six phases as ``type: "progress"`` events.

Every launch goes through ``prepare``, ``build``, ``distribute``, ``tuning``,
``runtime`` and ``post_launch``; each phase is reported running, then
succeeded, failed or skipped (with a reason), with optional steps and its
duration. Each event is also rendered as one PROGRESS log line, which the
logging bridge does not forward again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from sparkrun.core import log_bridge
from sparkrun.core.events import ProgressEvent, Status
from sparkrun.core.operation import Operation

__all__ = ["PHASES", "LaunchPhaseTracker"]

#: (slug, label) of each phase, in order; the phase number is its position + 1.
PHASES: tuple[tuple[str, str], ...] = (
    ("prepare", "Prepare"),
    ("build", "Build"),
    ("distribute", "Distribute"),
    ("tuning", "Tuning"),
    ("runtime", "Runtime"),
    ("post_launch", "Post-launch"),
)
_NUMBERS = {slug: index for index, (slug, _) in enumerate(PHASES, start=1)}
_LABELS = dict(PHASES)
_log = logging.getLogger("sparkrun.launch")


class LaunchPhaseTracker:
    """Reports the phases of one launch to its operation.

    A disabled tracker keeps its bookkeeping but emits nothing; the launch
    code can call it unconditionally.
    """

    def __init__(self, operation: Operation, *, enabled: bool = True) -> None:
        self._operation = operation
        self._enabled = enabled
        self._started: dict[str, float] = {}

    def _emit(
        self,
        slug: str,
        status: Status,
        message: str,
        *,
        step: tuple[int, int, str] | None = None,
        reason: str | None = None,
        duration_seconds: float | None = None,
    ) -> None:
        if not self._enabled:
            return
        number = _NUMBERS[slug]
        event: ProgressEvent = {
            "type": "progress",
            "operation_id": self._operation.operation_id,
            "timestamp": time.time(),
            "message": message,
            "phase": number,
            "total_phases": len(PHASES),
            "slug": slug,
            "label": _LABELS[slug],
            "status": status,
        }
        # The optional fields that are given, in this order (a step only while running, a reason on failing
        # or skipping, a duration on ending).
        if step is not None:
            event["step"] = {"index": step[0], "total": step[1], "label": step[2]}
        if reason is not None:
            event["reason"] = reason
        if duration_seconds is not None:
            event["duration_seconds"] = duration_seconds
        self._operation.deliver(event)
        if _log.isEnabledFor(log_bridge.PROGRESS):
            with log_bridge.suppressed():
                _log.log(
                    log_bridge.PROGRESS, "[%d/%d] %s", number, len(PHASES), message, extra={"sparkrun_event": event}
                )

    def start(self, slug: str) -> None:
        self._started[slug] = time.monotonic()
        self._emit(slug, "running", f"{_LABELS[slug]}: started")

    def step(self, slug: str, index: int, total: int, label: str) -> None:
        """One step of a running phase (``index`` of ``total``)."""
        self._emit(slug, "running", f"{_LABELS[slug]}: {label}", step=(index, total, label))

    def _duration(self, slug: str) -> float | None:
        started = self._started.pop(slug, None)
        return None if started is None else round(time.monotonic() - started, 6)

    def succeed(self, slug: str, detail: str = "done") -> None:
        self._emit(slug, "succeeded", f"{_LABELS[slug]}: {detail}", duration_seconds=self._duration(slug))

    def fail(self, slug: str, reason: str) -> None:
        self._emit(
            slug, "failed", f"{_LABELS[slug]}: failed: {reason}", reason=reason, duration_seconds=self._duration(slug)
        )

    def skip(self, slug: str, reason: str) -> None:
        self._emit(slug, "skipped", f"{_LABELS[slug]}: skipped ({reason})", reason=reason)

    @contextmanager
    def phase(self, slug: str) -> Iterator[None]:
        """Run a block as a phase: running on entry, succeeded on exit, failed on an exception."""
        self.start(slug)
        try:
            yield
        except BaseException as error:
            self.fail(slug, str(error) or type(error).__name__)
            raise
        if slug in self._started:  # the block may have ended it itself
            self.succeed(slug)
