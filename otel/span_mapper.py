"""Turns an operation's native event stream into OpenTelemetry spans.

One root span per operation (trace id = operation id), one span per feedback
activity (parented by ``parent_id``), one span per launch phase; reports
become span events. A report that says something new (the activity's first,
a warning or error, a new stage, status or message) is a span event, up to
the event limit less one slot kept for the last report. A report that only
repeats the previous one with moved counters or metrics (counter updates,
heartbeats) is held back and recorded as a sample at most once a second (by
event time, so a replay gives the same result) while half the budget is
left; the last one held back is recorded when the activity ends. Everything
else is counted in ``sparkrun.coalesced_events``, and final counters go on
the span.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, TracerProvider

from otel.ids import ChosenIdGenerator, activity_span_id, phase_span_id, root_span_id, trace_id_of
from otel.metrics import SparkrunMetrics
from sparkrun.core.envelope import MAX_TEXT_CHARS
from sparkrun.core.operation import OperationInfo, OperationObserver, Outcome
from sparkrun.errors import ReportedError, error_type_name

__all__ = ["SpanMapper"]

_log = logging.getLogger(__name__)
_SIGNIFICANT_LEVELS = frozenset({"warning", "error"})
_TERMINAL = frozenset({"succeeded", "failed", "skipped"})
_COMMON_FIELDS = frozenset({"type", "operation_id", "timestamp", "message", "source"})
SAMPLE_INTERVAL_SECONDS = 1.0
DEFAULT_EVENT_LIMIT = 128

# Hot-path tables (issue 10): every report used to format its event name and each field's
# attribute key with an f-string; these are built once instead.
#: Report fields copied onto the span event, with their attribute keys.
_REPORT_FIELDS = tuple(
    (field, f"sparkrun.{field}") for field in ("stage", "status", "current", "total", "total_kind", "unit")
)
_FEEDBACK_EVENT_NAMES = {
    level: f"sparkrun.feedback.{level}" for level in ("debug", "info", "progress", "warning", "error")
}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _event_limit_from_environment() -> int:
    """The span event limit the SDK applies when nobody chose one: ``OTEL_SPAN_EVENT_COUNT_LIMIT``, else 128."""
    from opentelemetry.sdk.trace import SpanLimits

    try:
        limit = SpanLimits().max_events
    except ValueError:  # a malformed OTEL_SPAN_EVENT_COUNT_LIMIT; otel.environment has warned about it
        return DEFAULT_EVENT_LIMIT
    return limit if isinstance(limit, int) and limit > 1 else DEFAULT_EVENT_LIMIT


def _text_of(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # an exception whose __str__ fails still ends its span
        return type(error).__name__


def _report_attributes(event: dict[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = {"message": event["message"]}
    get = event.get
    for field, key in _REPORT_FIELDS:
        value = get(field)
        if value is not None:
            attributes[key] = value
    metrics = get("metrics")
    if metrics:
        for name, value in metrics.items():
            if value is not None:
                attributes[f"sparkrun.metric.{name}"] = value
    return attributes


def _feedback_event_name(level: str) -> str:
    return _FEEDBACK_EVENT_NAMES.get(level) or f"sparkrun.feedback.{level}"


def _child_context(span: Span) -> Context:
    """The context children of ``span`` are started in: built once per parent, not once per child."""
    return trace.set_span_in_context(span, Context())


def _finish_status(span: Span, status: str | None, message: str, error_type: str | None) -> None:
    if status == "succeeded":
        span.set_status(Status(StatusCode.OK))
    elif status == "failed":
        span.set_attribute("error.type", error_type or "failed")
        span.set_status(Status(StatusCode.ERROR, message[:MAX_TEXT_CHARS]))


class _Activity:
    __slots__ = (
        "added",
        "bytes_seen",
        "coalesced",
        "context",
        "current",
        "ended",
        "error_type",
        "host",
        "last_added_at",
        "last_message",
        "pending",
        "reports",
        "source",
        "span",
        "stage",
        "started_at",
        "status",
        "synthesized",
        "total",
        "total_kind",
        "unit",
    )

    def __init__(self, span: Span, source: str, started_at: float) -> None:
        self.span, self.source, self.started_at = span, source, started_at
        self.host: str | None = None
        self.stage = self.status = self.total_kind = self.unit = self.error_type = None
        self.current = self.total = None
        self.pending: dict[str, Any] | None = None
        self.last_message = ""
        self.reports = self.added = self.coalesced = 0
        self.last_added_at = started_at
        self.bytes_seen: int | float = 0
        self.ended = self.synthesized = False
        #: The context its children start in, built when the first child opens (see _child_context).
        self.context: Context | None = None


class _OperationTrace:
    """The spans of one operation while its events arrive."""

    def __init__(self, mapper: SpanMapper, info: OperationInfo) -> None:
        self._mapper = mapper
        self._limit = mapper.event_limit
        self._metrics = mapper.metrics
        self.info = info
        self.trace_id = trace_id_of(info.operation_id)
        self.root = mapper._start_span(
            self.trace_id,
            root_span_id(info.operation_id),
            f"sparkrun.{info.name}",
            None,
            info.started_at,
            {"sparkrun.operation_id": info.operation_id, "sparkrun.operation": info.name},
        )
        self._root_context = _child_context(self.root)
        self._sample_room = self._limit // 2  # samples are taken while this much of the budget is left
        self._activities: dict[str, _Activity] = {}
        self._phases: dict[str, tuple[Span, float]] = {}
        self._root_events = 0
        self._dropped_root_events = 0

    # -- feedback -------------------------------------------------------------------

    def feedback(self, event: dict[str, Any]) -> None:
        activity = self._activities.get(event["activity_id"])
        if activity is None:
            activity = self._open(event["activity_id"], event, synthesized=False)
        elif activity.ended:
            self._root_event(f"sparkrun.feedback.{event['level']}", event, late=True)
            return
        first = activity.reports == 0
        if first and activity.synthesized:
            self._adopt(activity, event)
        activity.reports += 1
        level = event["level"]
        stage = event.get("stage")
        status = event.get("status")
        significant = first or level in _SIGNIFICANT_LEVELS or event["message"] != activity.last_message
        if stage is not None and stage != activity.stage:
            activity.stage, significant = stage, True
        if status is not None and status != activity.status:
            activity.status, significant = status, True
        transferred = self._count(activity, event) if "current" in event else 0
        if self._metrics is not None:  # the event count and any new bytes under one lock
            self._metrics.count_event(activity.source, level, activity.host, transferred)
        activity.last_message = event["message"]
        if significant:
            if activity.pending is not None:
                self._sample_pending(activity)
                if activity.pending is not None:  # no room for samples: it is superseded
                    activity.pending = None
                    activity.coalesced += 1
            if activity.added < self._limit - 1:
                self._add(activity, event)
            else:  # no room left but the slot kept for the last report: this may be it
                activity.pending = event
        else:  # a repeat: only counters or metrics moved
            if activity.pending is not None:
                activity.coalesced += 1
            activity.pending = event  # held back: it may be the last report
            if event["timestamp"] - activity.last_added_at >= SAMPLE_INTERVAL_SECONDS:
                self._sample_pending(activity)
        if status in _TERMINAL:
            metrics = event.get("metrics")
            activity.error_type = metrics.get("error_type") if metrics else None
            self._end(activity, event["timestamp"], unfinished=False)

    @staticmethod
    def _adopt(activity: _Activity, event: dict[str, Any]) -> None:
        """A parent synthesized for an earlier child reports at last: give it its own identity."""
        span = activity.span
        if activity.source != event["source"]:
            span.update_name(event["source"])
            activity.source = event["source"]
        attributes: dict[str, Any] = {"sparkrun.source": event["source"], "sparkrun.synthesized": False}
        if "host" in event:
            attributes["host.name"] = activity.host = event["host"]
        if "parent_id" in event:
            attributes["sparkrun.parent_id"] = event["parent_id"]  # its span stays under the root
        span.set_attributes(attributes)
        activity.synthesized = False

    @staticmethod
    def _count(activity: _Activity, event: dict[str, Any]) -> int | float:
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

    def _open(self, activity_id: str, event: dict[str, Any], *, synthesized: bool) -> _Activity:
        parent_id = None if synthesized else event.get("parent_id")
        if parent_id is None:
            parent = self._root_context
        else:
            parent_activity = self._activities.get(parent_id) or self._open(parent_id, event, synthesized=True)
            parent = parent_activity.context
            if parent is None:
                parent = parent_activity.context = _child_context(parent_activity.span)
        attributes: dict[str, Any] = {"sparkrun.activity_id": activity_id, "sparkrun.source": event["source"]}
        if synthesized:
            attributes["sparkrun.synthesized"] = True
        else:
            if parent_id is not None:
                attributes["sparkrun.parent_id"] = parent_id
            if "host" in event:
                attributes["host.name"] = event["host"]
        span = self._mapper._start_span(
            self.trace_id,
            activity_span_id(self.info.operation_id, activity_id),
            event["source"],
            parent,
            event["timestamp"],
            attributes,
        )
        activity = _Activity(span, event["source"], event["timestamp"])
        activity.synthesized = synthesized
        activity.host = None if synthesized else event.get("host")
        self._activities[activity_id] = activity
        return activity

    def _add(self, activity: _Activity, event: dict[str, Any]) -> None:
        timestamp = event["timestamp"]
        activity.span.add_event(_feedback_event_name(event["level"]), _report_attributes(event), _ns(timestamp))
        activity.added += 1
        activity.last_added_at = timestamp

    def _sample_pending(self, activity: _Activity) -> None:
        """Record the held-back update as a sample while half the event budget is left."""
        if activity.pending is not None and activity.added < self._sample_room:
            self._add(activity, activity.pending)
            activity.pending = None

    def _end(self, activity: _Activity, end_time: float, *, unfinished: bool) -> None:
        if activity.pending is not None:  # the last report; samples and significant events left room for it
            self._add(activity, activity.pending)
            activity.pending = None
        activity.ended = True
        span = activity.span
        final = {
            "sparkrun.stage": activity.stage,
            "sparkrun.status": activity.status,
            "sparkrun.current": activity.current,
            "sparkrun.total": activity.total,
            "sparkrun.total_kind": activity.total_kind,
            "sparkrun.unit": activity.unit,
            "sparkrun.last_message": activity.last_message[:MAX_TEXT_CHARS] or None,
        }
        attributes = {key: value for key, value in final.items() if value is not None}
        attributes["sparkrun.reports"] = activity.reports
        attributes["sparkrun.coalesced_events"] = activity.coalesced
        if unfinished:
            attributes["sparkrun.unfinished"] = True
        span.set_attributes(attributes)  # one call: the SDK takes its lock and cleans values per call
        if not unfinished:
            _finish_status(span, activity.status, activity.last_message, activity.error_type)
        span.end(_ns(end_time))
        # Keep only the ended span's identity (for late children): holding the recorded span kept
        # every event of every activity alive until the operation ended, which cost memory and
        # garbage-collection time in operations with many activities.
        activity.span = trace.NonRecordingSpan(span.get_span_context())
        activity.context = None
        if self._metrics is not None:
            status = "unfinished" if unfinished else activity.status or "unknown"
            seconds = max(0.0, end_time - activity.started_at)
            self._metrics.activity_ended(activity.source, status, seconds, activity.stage, activity.coalesced)

    # -- other event types ------------------------------------------------------------

    def _root_event(
        self, name: str, event: dict[str, Any], *, late: bool = False, extra: dict[str, Any] | None = None
    ) -> None:
        if self._root_events >= self._limit - 1:
            self._dropped_root_events += 1
            return
        attributes = {"message": event["message"], "sparkrun.source": event.get("source", ""), **(extra or {})}
        if late:
            attributes["sparkrun.activity_id"] = event["activity_id"]
            attributes["sparkrun.late"] = True
        self.root.add_event(name, attributes, _ns(event["timestamp"]))
        self._root_events += 1

    def log(self, event: dict[str, Any]) -> None:
        self._root_event(f"sparkrun.log.{event['level']}", event)

    def other(self, event: dict[str, Any]) -> None:
        """A ``benchmark``, ``setup`` or any later event type: a root-span event with its scalar fields."""
        kind = event["type"]
        name = f"sparkrun.{kind}.{event['kind']}" if kind == "benchmark" and "kind" in event else f"sparkrun.{kind}"
        extra = {
            f"sparkrun.{key}": value
            for key, value in event.items()
            if key not in _COMMON_FIELDS and isinstance(value, (str, bool, int, float))
        }
        self._root_event(name, event, extra=extra)

    def phase(self, event: dict[str, Any]) -> None:
        slug, status, at = event["slug"], event["status"], event["timestamp"]
        entry = self._phases.get(slug)
        if entry is None:
            duration = event.get("duration_seconds") if status != "running" else None
            started_at = at - duration if isinstance(duration, (int, float)) else at
            span = self._mapper._start_span(
                self.trace_id,
                phase_span_id(self.info.operation_id, slug),
                f"launch.{slug}",
                self._root_context,
                started_at,
                {"sparkrun.phase": event["phase"], "sparkrun.total_phases": event["total_phases"]},
            )
            entry = self._phases[slug] = (span, started_at)
        span = entry[0]
        if not span.is_recording():
            return
        span.set_attribute("sparkrun.label", event["label"])
        step = event.get("step")
        if step:
            span.add_event(
                "sparkrun.launch.step",
                {"message": event["message"], **{f"sparkrun.step.{k}": v for k, v in step.items()}},
                _ns(at),
            )
        if status in _TERMINAL:
            span.set_attribute("sparkrun.status", status)
            if event.get("reason"):
                span.set_attribute("sparkrun.reason", event["reason"])
            _finish_status(span, status, event["message"], None)
            span.end(_ns(at))

    # -- finish ---------------------------------------------------------------------

    def finish(self, outcome: Outcome | None, error: BaseException | None, end_time: float) -> None:
        for activity in reversed(self._activities.values()):
            if not activity.ended:
                self._end(activity, end_time, unfinished=True)
        for span, _ in self._phases.values():
            if span.is_recording():
                span.set_attribute("sparkrun.unfinished", True)
                span.end(_ns(end_time))
        root = self.root
        root.set_attribute("sparkrun.outcome", outcome or "unknown")
        if self._dropped_root_events:
            root.set_attribute("sparkrun.dropped_events", self._dropped_root_events)
        if outcome == "succeeded":
            root.set_status(Status(StatusCode.OK))
        elif outcome == "failed":
            description = None
            if error is not None:
                root.set_attribute("error.type", error_type_name(error))
                if isinstance(error, ReportedError):  # a description (redacted, or replayed): it has no frames
                    attributes = {"exception.type": error.type_name, "exception.message": error.message}
                    if error.stacktrace:
                        attributes["exception.stacktrace"] = error.stacktrace
                    root.add_event("exception", attributes, _ns(end_time))
                else:
                    root.record_exception(error, timestamp=_ns(end_time))
                description = _text_of(error)[:MAX_TEXT_CHARS]
            root.set_status(Status(StatusCode.ERROR, description))
        root.end(_ns(end_time))
        if self._metrics is not None:
            seconds = max(0.0, end_time - self.info.started_at)
            self._metrics.operation_ended(self.info.name, outcome or "unknown", seconds)


class SpanMapper(OperationObserver):
    """The operation observer behind :class:`otel.SparkrunInstrumentor`.

    It only ever adds spans and events; exporting happens in the provider's
    span processors (batched, off the operation's thread), and any error of
    its own is logged once per operation, never raised into delivery.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider,
        meter_provider: Any | None = None,
        *,
        event_limit: int | None = None,
    ) -> None:
        self._ids = ChosenIdGenerator()
        self._provider = tracer_provider
        self._tracer = self._tracer_of(tracer_provider)
        # The SDK keeps a provider's limits to itself: whoever built the provider (otel.configure) says it.
        self.event_limit = event_limit or _event_limit_from_environment()
        self.metrics = SparkrunMetrics(meter_provider) if meter_provider is not None else None
        self._traces: dict[str, _OperationTrace] = {}
        self._lock = threading.Lock()

    def _tracer_of(self, provider: TracerProvider) -> trace.Tracer:
        from sparkrun import __version__

        tracer = provider.get_tracer("sparkrun", __version__)
        if hasattr(tracer, "id_generator"):
            tracer.id_generator = self._ids  # our own tracer instance only
        return tracer

    def _resolve_provider(self) -> None:
        # Instrumented before any SDK was configured (e.g. by opentelemetry-instrument), the mapper
        # holds the global proxy; switch to the real provider once one is installed.
        if isinstance(self._provider, trace.ProxyTracerProvider):
            installed = trace.get_tracer_provider()
            if not isinstance(installed, trace.ProxyTracerProvider):
                self._provider, self._tracer = installed, self._tracer_of(installed)

    def _start_span(
        self,
        trace_id: int,
        span_id: int,
        name: str,
        parent: Context | None,
        start_time: float,
        attributes: dict[str, Any],
    ) -> Span:
        """Start a span with the chosen ids; ``parent`` is the context from ``_child_context`` (None: a root)."""
        self._ids.choose(trace_id, span_id)
        return self._tracer.start_span(
            name, context=parent if parent is not None else Context(), attributes=attributes, start_time=_ns(start_time)
        )

    def start(self, info: OperationInfo) -> None:
        """Open the root span of an operation."""
        self._resolve_provider()
        operation_trace = _OperationTrace(self, info)
        with self._lock:
            self._traces[info.operation_id] = operation_trace
        if self.metrics is not None:
            self.metrics.operation_started(info.name)

    def handle(self, operation_id: str, event: dict[str, Any]) -> None:
        """Map one native event of a started operation (events of other operations are ignored)."""
        operation_trace = self._traces.get(operation_id)
        if operation_trace is None:
            return
        kind = event.get("type")
        try:
            if kind == "feedback":
                operation_trace.feedback(event)
            elif kind == "log":
                operation_trace.log(event)
            elif kind == "progress":
                operation_trace.phase(event)
            elif isinstance(kind, str) and isinstance(event.get("message"), str):
                operation_trace.other(event)
        except Exception:
            _log.debug("could not map event %r", event, exc_info=True)

    def finish(self, operation_id: str, outcome: Outcome | None, error: BaseException | None, end_time: float) -> None:
        """End every span of the operation; the root's status comes from ``outcome``."""
        with self._lock:
            operation_trace = self._traces.pop(operation_id, None)
        if operation_trace is not None:
            try:
                operation_trace.finish(outcome, error, end_time)
            except Exception:
                _log.warning("could not finish the trace of operation %s", operation_id, exc_info=True)

    # -- OperationObserver ----------------------------------------------------------

    def operation_started(self, info: OperationInfo) -> None:
        self.start(info)

    def on_event(self, info: OperationInfo, event: dict[str, Any]) -> None:
        self.handle(info.operation_id, event)

    def operation_finished(self, info: OperationInfo, outcome: Outcome, error: BaseException | None) -> None:
        self.finish(info.operation_id, outcome, error, info.finished_at or time.time())
