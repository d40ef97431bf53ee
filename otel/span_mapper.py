"""Turns an operation's native event stream into OpenTelemetry spans and metrics.

The operation observer behind :class:`otel.SparkrunInstrumentor`. For each
operation it runs an :class:`~otel.activity_tracker.ActivityTracker` (what
each activity does, which reports are span events) whose decisions go to a
:class:`~otel.span_emitter.SpanEmitter` (the spans) and a
:class:`~otel.metrics.MetricsSink` (the metrics). Trace id = operation id
and span ids derived from sparkrun's ids need a provider that takes chosen
ids (:class:`~otel.ids.OperationIdGenerator`, as ``otel.configure()`` builds
it); with any other provider the spans get random ids, and the mapper says
so once.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import TracerProvider

from otel.activity_tracker import ActivityTracker
from otel.ids import OperationIdGenerator
from otel.metrics import MetricsSink, SparkrunMetrics
from otel.span_emitter import SpanEmitter
from sparkrun.core.events import Event
from sparkrun.core.operation import OperationInfo, OperationObserver, Outcome

__all__ = ["DEFAULT_EVENT_LIMIT", "SpanMapper"]

_log = logging.getLogger(__name__)
DEFAULT_EVENT_LIMIT = 128


def _event_limit_from_environment() -> int:
    """The span event limit the SDK applies when nobody chose one: ``OTEL_SPAN_EVENT_COUNT_LIMIT``, else 128."""
    from opentelemetry.sdk.trace import SpanLimits

    try:
        limit = SpanLimits().max_events
    except ValueError:  # a malformed OTEL_SPAN_EVENT_COUNT_LIMIT; otel.environment has warned about it
        return DEFAULT_EVENT_LIMIT
    return limit if isinstance(limit, int) and limit > 1 else DEFAULT_EVENT_LIMIT


@dataclass
class _Trace:
    """One operation in flight: its activities and its spans."""

    tracker: ActivityTracker
    emitter: SpanEmitter


class SpanMapper(OperationObserver):
    """Maps every operation it observes to a trace (and, given a meter provider, to metrics).

    It only ever adds spans and events; exporting happens in the provider's
    span processors (batched, off the operation's thread), and any error of
    its own is logged, never raised into delivery.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider,
        meter_provider: Any | None = None,
        *,
        event_limit: int | None = None,
    ) -> None:
        self._provider = tracer_provider
        self._tracer, self._ids = self._tracer_of(tracer_provider)
        # The SDK keeps a provider's limits to itself: whoever built the provider (otel.configure) says it.
        self.event_limit = event_limit or _event_limit_from_environment()
        self.metrics = SparkrunMetrics(meter_provider) if meter_provider is not None else None
        self._traces: dict[str, _Trace] = {}
        self._lock = threading.Lock()
        self._warned = False

    @staticmethod
    def _tracer_of(provider: TracerProvider) -> tuple[trace.Tracer, OperationIdGenerator | None]:
        from sparkrun import __version__

        ids = getattr(provider, "id_generator", None)  # a public attribute of the SDK's provider
        return provider.get_tracer("sparkrun", __version__), ids if isinstance(ids, OperationIdGenerator) else None

    def _resolve_provider(self) -> None:
        # Instrumented before any SDK was configured (e.g. by opentelemetry-instrument), the mapper
        # holds the global proxy; switch to the real provider once one is installed.
        if isinstance(self._provider, trace.ProxyTracerProvider):
            installed = trace.get_tracer_provider()
            if not isinstance(installed, trace.ProxyTracerProvider):
                self._provider = installed
                self._tracer, self._ids = self._tracer_of(installed)
        if self._ids is None and not self._warned and not isinstance(self._provider, trace.NoOpTracerProvider):
            self._warned = True
            _log.warning(
                "the tracer provider does not take sparkrun's span ids, so trace ids are not operation ids; "
                "build it with id_generator=otel.OperationIdGenerator() (otel.configure() does)"
            )

    def start(self, info: OperationInfo) -> None:
        """Open the root span of an operation."""
        self._resolve_provider()
        emitter = SpanEmitter(self._tracer, self._ids, info, event_limit=self.event_limit)
        sinks = [emitter] if self.metrics is None else [emitter, MetricsSink(self.metrics)]
        with self._lock:
            self._traces[info.operation_id] = _Trace(ActivityTracker(sinks, event_limit=self.event_limit), emitter)
        if self.metrics is not None:
            self.metrics.operation_started(info.name)

    def handle(self, operation_id: str, event: Event) -> None:
        """Map one native event of a started operation (events of other operations are ignored)."""
        current = self._traces.get(operation_id)
        if current is None:
            return
        try:
            if event["type"] == "feedback":
                current.tracker.feedback(event)
            elif event["type"] == "log":
                current.emitter.log(event)
            elif event["type"] == "progress":
                current.emitter.phase(event)
            elif isinstance(event.get("type"), str) and isinstance(event.get("message"), str):
                current.emitter.other(event)
                if event["type"] == "benchmark" and self.metrics is not None:
                    self.metrics.benchmarks.event(event)
        except Exception:
            _log.debug("could not map event %r", event, exc_info=True)

    def finish(self, operation_id: str, outcome: Outcome | None, error: BaseException | None, end_time: float) -> None:
        """End every span of the operation; the root's status comes from ``outcome``."""
        with self._lock:
            current = self._traces.pop(operation_id, None)
        if current is None:
            return
        try:
            current.tracker.finish(end_time)
            current.emitter.finish(outcome, error, end_time)
        except Exception:
            _log.warning("could not finish the trace of operation %s", operation_id, exc_info=True)
        if self.metrics is not None:
            seconds = max(0.0, end_time - current.emitter.info.started_at)
            self.metrics.operation_ended(current.emitter.info.name, outcome or "unknown", seconds)

    # -- OperationObserver ----------------------------------------------------------

    def operation_started(self, info: OperationInfo) -> None:
        self.start(info)

    def on_event(self, info: OperationInfo, event: Event) -> None:
        self.handle(info.operation_id, event)

    def operation_finished(self, info: OperationInfo, outcome: Outcome, error: BaseException | None) -> None:
        self.finish(info.operation_id, outcome, error, info.finished_at or time.time())
