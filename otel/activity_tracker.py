"""What each activity of an operation is doing, and which of its reports are worth a span event.

The tracker knows the state of every activity (stage, status, counters,
host, parent) and decides, report by report, what the span event budget
(the SDK's limit per span, 128 by default) is spent on. A report that says
something new (the activity's first, a warning or error, a new stage,
status or message) is recorded while the span holds fewer than *limit* - 1
events. A report that only repeats the previous one with moved counters or
metrics (a transfer's updates, a heartbeat) is held back and recorded as a
sample at most once a second by event time (so a replay decides the same)
while half the budget is left. The last report held back is recorded when
the activity ends, in the slot kept for it. Everything else is counted as
coalesced.

A *timed* activity was measured elsewhere (a controller span on its own
clock, a benchmark attempt): a report carrying the metric ``started_at``
(Unix seconds) sets its start, and a terminal report carrying
``duration_seconds`` as well ends it ``duration_seconds`` after that start,
whatever the reports' own timestamps.

Decisions go to :class:`ActivitySink` objects: the span emitter turns them
into spans, the metrics sink into counters and histograms. The daemon uses
the tracker with the metrics sink alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sparkrun.core.events import FeedbackEvent

__all__ = ["SAMPLE_INTERVAL_SECONDS", "Activity", "ActivitySink", "ActivityTracker"]

SAMPLE_INTERVAL_SECONDS = 1.0
_SIGNIFICANT_LEVELS = frozenset({"warning", "error"})
_TERMINAL = frozenset({"succeeded", "failed", "skipped"})


class Activity:
    """One activity of an operation, as its reports so far describe it."""

    __slots__ = (
        "activity_id",
        "bytes_seen",
        "coalesced",
        "current",
        "ended",
        "error_type",
        "host",
        "last_message",
        "last_recorded_at",
        "metrics",
        "parent_id",
        "pending",
        "recorded",
        "reports",
        "source",
        "stage",
        "started_at",
        "status",
        "synthesized",
        "timed",
        "total",
        "total_kind",
        "unit",
    )

    def __init__(self, activity_id: str, source: str, started_at: float, *, synthesized: bool) -> None:
        self.activity_id, self.source, self.started_at = activity_id, source, started_at
        #: A parent that never reported: opened for its child's sake until it reports itself.
        self.synthesized = synthesized
        self.parent_id: str | None = None
        self.host: str | None = None
        self.stage: str | None = None
        self.status: str | None = None
        self.total_kind: str | None = None
        self.unit: str | None = None
        self.error_type: str | None = None
        self.current: int | float | None = None
        self.total: int | float | None = None
        self.pending: FeedbackEvent | None = None
        #: The metrics of the latest report that had any: on the span when it ends.
        self.metrics: Mapping[str, object] | None = None
        self.last_message = ""
        self.reports = self.recorded = self.coalesced = 0
        self.last_recorded_at = started_at
        self.bytes_seen: int | float = 0
        self.ended = False
        #: ``started_at`` came from a report's metrics: the real start, measured elsewhere.
        self.timed = False


class ActivitySink:
    """Receives the tracker's decisions; every method does nothing unless overridden."""

    def opened(self, activity: Activity, parent: Activity | None, event: FeedbackEvent) -> None:
        """``activity`` starts, at ``event``'s time; ``parent`` is None for a child of the operation itself."""

    def adopted(self, activity: Activity, event: FeedbackEvent) -> None:
        """A synthesized parent reported at last: ``activity`` now has its source, host and parent."""

    def counted(self, activity: Activity, event: FeedbackEvent, transferred: int | float) -> None:
        """Every report of a running activity; ``transferred`` is the bytes its counter moved (0 if none)."""

    def recorded(self, activity: Activity, event: FeedbackEvent) -> None:
        """``event`` is worth a span event of ``activity``."""

    def ended(self, activity: Activity, end_time: float, *, unfinished: bool) -> None:
        """``activity`` ended at ``end_time``: by a terminal status, or ``unfinished`` when its operation ended first.

        ``activity.started_at`` and ``end_time`` are the real times of a timed activity.
        """

    def late(self, event: FeedbackEvent) -> None:
        """A report of an activity that had already ended."""


def _seconds(value: object) -> float | None:
    """``value`` as a non-negative number of seconds, else None (a boolean is not a number here)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _time_start(activity: Activity, started_at: object) -> None:
    """A report's ``started_at`` metric is the activity's real start (Unix seconds, so never 0)."""
    seconds = _seconds(started_at)
    if seconds:
        activity.started_at, activity.timed = seconds, True


def _end_time(activity: Activity, event: FeedbackEvent, metrics: Mapping[str, object] | None) -> float:
    """A timed activity ends ``duration_seconds`` after its real start; any other at its terminal report."""
    duration = _seconds(metrics.get("duration_seconds")) if metrics and activity.timed else None
    return event["timestamp"] if duration is None else activity.started_at + duration


class ActivityTracker:
    """The activities of one operation; feed it the operation's feedback events in order."""

    def __init__(self, sinks: Sequence[ActivitySink], *, event_limit: int) -> None:
        self._sinks = tuple(sinks)
        self._limit = event_limit
        self._sample_room = event_limit // 2  # samples are taken while this much of the budget is left
        self._activities: dict[str, Activity] = {}

    def feedback(self, event: FeedbackEvent) -> None:
        activity = self._activities.get(event["activity_id"])
        if activity is None:
            activity = self._open(event["activity_id"], event, synthesized=False)
        elif activity.ended:
            for sink in self._sinks:
                sink.late(event)
            return
        first = activity.reports == 0
        if first and activity.synthesized:
            self._adopt(activity, event)
        activity.reports += 1
        stage, status, message = event.get("stage"), event.get("status"), event["message"]
        significant = first or event["level"] in _SIGNIFICANT_LEVELS or message != activity.last_message
        if stage is not None and stage != activity.stage:
            activity.stage, significant = stage, True
        if status is not None and status != activity.status:
            activity.status, significant = status, True
        metrics = event.get("metrics")
        if metrics is not None:
            activity.metrics = metrics
            if "started_at" in metrics:
                _time_start(activity, metrics["started_at"])
        transferred = self._count(activity, event) if "current" in event else 0
        for sink in self._sinks:
            sink.counted(activity, event, transferred)
        activity.last_message = message
        if significant:
            self._significant(activity, event)
        else:  # a repeat: only counters or metrics moved
            if activity.pending is not None:
                activity.coalesced += 1
            activity.pending = event  # held back: it may be the last report
            if event["timestamp"] - activity.last_recorded_at >= SAMPLE_INTERVAL_SECONDS:
                self._sample_pending(activity)
        if status in _TERMINAL:
            error_type = metrics.get("error_type") if metrics else None
            activity.error_type = error_type if isinstance(error_type, str) else None
            self._end(activity, _end_time(activity, event, metrics), unfinished=False)

    def finish(self, end_time: float) -> None:
        """The operation ended: end every activity still open, children before their parents."""
        for activity in reversed(self._activities.values()):
            if not activity.ended:
                self._end(activity, end_time, unfinished=True)

    def _significant(self, activity: Activity, event: FeedbackEvent) -> None:
        if activity.pending is not None:
            self._sample_pending(activity)
            if activity.pending is not None:  # no room for samples: it is superseded
                activity.pending = None
                activity.coalesced += 1
        if activity.recorded < self._limit - 1:
            self._record(activity, event)
        else:  # no room left but the slot kept for the last report: this may be it
            activity.pending = event

    def _open(self, activity_id: str, event: FeedbackEvent, *, synthesized: bool) -> Activity:
        parent_id = None if synthesized else event.get("parent_id")
        parent = None
        if parent_id is not None:
            parent = self._activities.get(parent_id) or self._open(parent_id, event, synthesized=True)
        activity = Activity(activity_id, event["source"], event["timestamp"], synthesized=synthesized)
        if not synthesized:
            activity.parent_id, activity.host = parent_id, event.get("host")
        self._activities[activity_id] = activity
        for sink in self._sinks:
            sink.opened(activity, parent, event)
        return activity

    def _adopt(self, activity: Activity, event: FeedbackEvent) -> None:
        activity.source = event["source"]
        activity.host = event.get("host")
        activity.parent_id = event.get("parent_id")  # its span stays where it opened, under the root
        activity.synthesized = False
        for sink in self._sinks:
            sink.adopted(activity, event)

    @staticmethod
    def _count(activity: Activity, event: FeedbackEvent) -> int | float:
        """Keep the latest counters; return the bytes transferred since the last report (0 if none)."""
        current = event["current"]
        activity.current = current
        activity.total = event.get("total")
        activity.total_kind = event.get("total_kind")
        unit = event.get("unit")
        if unit is not None:
            activity.unit = unit
        if activity.unit == "bytes" and current > activity.bytes_seen:
            transferred = current - activity.bytes_seen
            activity.bytes_seen = current
            return transferred
        return 0

    def _record(self, activity: Activity, event: FeedbackEvent) -> None:
        activity.recorded += 1
        activity.last_recorded_at = event["timestamp"]
        for sink in self._sinks:
            sink.recorded(activity, event)

    def _sample_pending(self, activity: Activity) -> None:
        """Record the held-back repeat as a sample while half the event budget is left."""
        if activity.pending is not None and activity.recorded < self._sample_room:
            self._record(activity, activity.pending)
            activity.pending = None

    def _end(self, activity: Activity, end_time: float, *, unfinished: bool) -> None:
        end_time = max(end_time, activity.started_at)  # a timed start may lie after the operation's end
        if activity.pending is not None:  # the last report; samples and significant reports left room for it
            self._record(activity, activity.pending)
            activity.pending = None
        activity.ended = True
        for sink in self._sinks:
            sink.ended(activity, end_time, unfinished=unfinished)
