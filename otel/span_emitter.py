"""The spans of one operation: a root, one span per activity and per launch phase, events on them.

The emitter is an :class:`~otel.activity_tracker.ActivitySink`: the tracker
decides what happens to each activity and which reports are span events; the
emitter only makes spans of it. Launch phases, legacy log records and the
event types that predate the envelope (``benchmark``, ``setup``, anything
unknown) come to it directly. Span ids derive from the operation's and the
activity's ids (:mod:`otel.ids`) when the provider takes chosen ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanContext, Status, StatusCode, Tracer

from otel.activity_tracker import Activity, ActivitySink
from otel.ids import OperationIdGenerator, activity_span_id, phase_span_id, root_span_id, trace_id_of
from sparkrun.core.envelope import MAX_TEXT_CHARS
from sparkrun.core.events import Event, FeedbackEvent, LogEvent, ProgressEvent
from sparkrun.core.operation import OperationInfo, Outcome
from sparkrun.errors import ReportedError, error_type_name

__all__ = ["SpanEmitter"]

_TERMINAL = frozenset({"succeeded", "failed", "skipped"})
_COMMON_FIELDS = frozenset({"type", "operation_id", "timestamp", "message", "source"})
#: Report fields copied onto a span event, with their attribute keys (built once: this is the hot path).
_REPORT_FIELDS = tuple(
    (field, f"sparkrun.{field}") for field in ("stage", "status", "current", "total", "total_kind", "unit")
)
_FEEDBACK_EVENT_NAMES = {
    level: f"sparkrun.feedback.{level}" for level in ("debug", "info", "progress", "warning", "error")
}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def _text_of(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # an exception whose __str__ fails still ends its span
        return type(error).__name__


def _metric_attributes(metrics: Mapping[str, object]) -> dict[str, Any]:
    """``sparkrun.metric.<name>`` for each metric with a value."""
    return {f"sparkrun.metric.{name}": value for name, value in metrics.items() if value is not None}


def _report_attributes(event: FeedbackEvent) -> dict[str, Any]:
    attributes: dict[str, Any] = {"message": event["message"]}
    get = event.get
    for field, key in _REPORT_FIELDS:
        value = get(field)
        if value is not None:
            attributes[key] = value
    metrics = event.get("metrics")
    if metrics:
        attributes.update(_metric_attributes(metrics))
    return attributes


def _child_context(span: Span) -> Context:
    """The context children of ``span`` are started in: built once per parent, not once per child."""
    return trace.set_span_in_context(span, Context())


def _finish_status(span: Span, status: str | None, message: str, error_type: str | None) -> None:
    if status == "succeeded":
        span.set_status(Status(StatusCode.OK))
    elif status == "failed":
        span.set_attribute("error.type", error_type or "failed")
        span.set_status(Status(StatusCode.ERROR, message[:MAX_TEXT_CHARS]))


class _Handle:
    """An activity's span, started only when the activity ends: only then are its real times known.

    Until then the handle keeps the span's name, parent context, attributes and
    recorded events. Children need no started parent: with derived ids the
    parent's span context is known in advance.
    """

    __slots__ = ("attributes", "context", "events", "name", "parent", "span")

    def __init__(self, name: str, parent: Context, attributes: dict[str, Any]) -> None:
        self.name, self.parent, self.attributes = name, parent, attributes
        self.events: list[tuple[str, dict[str, Any], int]] = []
        self.span: Span | None = None
        #: The context children start in, made when the first child opens.
        self.context: Context | None = None


class SpanEmitter(ActivitySink):
    """Makes the spans of one operation; started with its root span."""

    def __init__(
        self, tracer: Tracer, ids: OperationIdGenerator | None, info: OperationInfo, *, event_limit: int
    ) -> None:
        self._tracer, self._ids, self.info = tracer, ids, info
        self._limit = event_limit
        self.trace_id = trace_id_of(info.operation_id)
        self.root = self._start(
            root_span_id(info.operation_id),
            f"sparkrun.{info.name}",
            None,
            info.started_at,
            {"sparkrun.operation_id": info.operation_id, "sparkrun.operation": info.name},
        )
        self._root_context = _child_context(self.root)
        self._spans: dict[str, _Handle] = {}
        self._phases: dict[str, Span] = {}
        self._root_events = 0
        self._dropped_root_events = 0

    def _start(
        self, span_id: int, name: str, parent: Context | None, start_time: float, attributes: dict[str, Any]
    ) -> Span:
        """Start a span with the derived ids (when the provider takes them); ``parent`` None is a root."""
        if self._ids is not None:
            self._ids.choose(self.trace_id, span_id)
        return self._tracer.start_span(
            name, context=parent if parent is not None else Context(), attributes=attributes, start_time=_ns(start_time)
        )

    # -- activities (ActivitySink) ------------------------------------------------------

    def _children_of(self, parent: Activity) -> Context:
        """The context the children of ``parent`` start in, made once per parent."""
        handle = self._spans[parent.activity_id]
        if handle.context is None:
            if handle.span is None and self._ids is not None:  # its id is known before it starts
                span_id = activity_span_id(self.info.operation_id, parent.activity_id)
                root = self.root.get_span_context()
                known = SpanContext(self.trace_id, span_id, False, root.trace_flags, root.trace_state)
                handle.context = _child_context(trace.NonRecordingSpan(known))
            else:  # random ids (a foreign provider): a child needs its parent's span started
                handle.context = _child_context(self._started(handle, parent))
        return handle.context

    def _started(self, handle: _Handle, activity: Activity) -> Span:
        """The activity's span, started now if it was not yet (at the activity's start, known by then)."""
        if handle.span is None:
            span_id = activity_span_id(self.info.operation_id, activity.activity_id)
            span = handle.span = self._start(
                span_id, handle.name, handle.parent, activity.started_at, handle.attributes
            )
            for name, attributes, at in handle.events:
                span.add_event(name, attributes, at)
            handle.events = []
        return handle.span

    def opened(self, activity: Activity, parent: Activity | None, event: FeedbackEvent) -> None:
        context = self._root_context if parent is None else self._children_of(parent)
        attributes: dict[str, Any] = {"sparkrun.activity_id": activity.activity_id, "sparkrun.source": activity.source}
        if activity.synthesized:
            attributes["sparkrun.synthesized"] = True
        else:
            if activity.parent_id is not None:
                attributes["sparkrun.parent_id"] = activity.parent_id
            if activity.host is not None:
                attributes["host.name"] = activity.host
        self._spans[activity.activity_id] = _Handle(activity.source, context, attributes)

    def adopted(self, activity: Activity, event: FeedbackEvent) -> None:
        handle = self._spans[activity.activity_id]
        attributes: dict[str, Any] = {"sparkrun.source": activity.source, "sparkrun.synthesized": False}
        if activity.host is not None:
            attributes["host.name"] = activity.host
        if activity.parent_id is not None:
            attributes["sparkrun.parent_id"] = activity.parent_id  # its span stays under the root
        handle.name = activity.source
        if handle.span is None:
            handle.attributes.update(attributes)
        else:
            handle.span.update_name(activity.source)
            handle.span.set_attributes(attributes)

    def recorded(self, activity: Activity, event: FeedbackEvent) -> None:
        name = _FEEDBACK_EVENT_NAMES.get(event["level"]) or f"sparkrun.feedback.{event['level']}"
        handle = self._spans[activity.activity_id]
        if handle.span is None:
            handle.events.append((name, _report_attributes(event), _ns(event["timestamp"])))
        else:
            handle.span.add_event(name, _report_attributes(event), _ns(event["timestamp"]))

    def ended(self, activity: Activity, end_time: float, *, unfinished: bool) -> None:
        handle = self._spans[activity.activity_id]
        span = self._started(handle, activity)
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
        if activity.metrics:  # the latest metrics, like the final counters, describe the whole activity
            attributes.update(_metric_attributes(activity.metrics))
        attributes["sparkrun.reports"] = activity.reports
        attributes["sparkrun.coalesced_events"] = activity.coalesced
        if unfinished:
            attributes["sparkrun.unfinished"] = True
        span.set_attributes(attributes)  # one call: the SDK takes its lock and cleans values per call
        if not unfinished:
            _finish_status(span, activity.status, activity.last_message, activity.error_type)
        span.end(_ns(end_time))
        # Keep only the ended span's identity (for late children): holding the recorded span would keep
        # every event of every activity alive until the operation ended.
        handle.span, handle.context = trace.NonRecordingSpan(span.get_span_context()), None
        handle.attributes = {}

    def late(self, event: FeedbackEvent) -> None:
        self._root_event(
            f"sparkrun.feedback.{event['level']}",
            event,
            extra={"sparkrun.activity_id": event["activity_id"], "sparkrun.late": True},
        )

    # -- events of the operation itself --------------------------------------------------

    def _root_event(self, name: str, event: Event, *, extra: dict[str, Any] | None = None) -> None:
        if self._root_events >= self._limit - 1:
            self._dropped_root_events += 1
            return
        source = event.get("source", "")
        attributes = {"message": event["message"], "sparkrun.source": source, **(extra or {})}
        self.root.add_event(name, attributes, _ns(event["timestamp"]))
        self._root_events += 1

    def log(self, event: LogEvent) -> None:
        self._root_event(f"sparkrun.log.{event['level']}", event)

    def other(self, event: Event) -> None:
        """A ``benchmark``, ``setup`` or any later event type: a root-span event with its scalar fields."""
        kind = event["type"]
        name = f"sparkrun.{kind}.{event['kind']}" if event["type"] == "benchmark" else f"sparkrun.{kind}"
        extra = {
            f"sparkrun.{key}": value
            for key, value in event.items()
            if key not in _COMMON_FIELDS and isinstance(value, (str, bool, int, float))
        }
        self._root_event(name, event, extra=extra)

    def phase(self, event: ProgressEvent) -> None:
        slug, status, at = event["slug"], event["status"], event["timestamp"]
        span = self._phases.get(slug)
        if span is None:
            duration = event.get("duration_seconds") if status != "running" else None
            started_at = at - duration if isinstance(duration, (int, float)) else at
            span = self._phases[slug] = self._start(
                phase_span_id(self.info.operation_id, slug),
                f"launch.{slug}",
                self._root_context,
                started_at,
                {"sparkrun.phase": event["phase"], "sparkrun.total_phases": event["total_phases"]},
            )
        if not span.is_recording():
            return
        span.set_attribute("sparkrun.label", event["label"])
        step = event.get("step")
        if step:
            # Every field of the step, as it came (a replayed step may carry more than index, total, label).
            fields: dict[str, Any] = {f"sparkrun.step.{k}": v for k, v in step.items()}
            span.add_event("sparkrun.launch.step", {"message": event["message"], **fields}, _ns(at))
        if status in _TERMINAL:
            span.set_attribute("sparkrun.status", status)
            if event.get("reason"):
                span.set_attribute("sparkrun.reason", event["reason"])
            _finish_status(span, status, event["message"], None)
            span.end(_ns(at))

    def finish(self, outcome: Outcome | None, error: BaseException | None, end_time: float) -> None:
        """End the phases still open (as unfinished) and the root, whose status is the operation's outcome.

        Activities are ended before, by the tracker.
        """
        for span in self._phases.values():
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
