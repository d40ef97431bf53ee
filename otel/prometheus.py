"""The daemon's Prometheus endpoint: the adapter's metrics for every job, and the daemon's own.

Jobs run in worker processes, so the daemon rebuilds the adapter's metrics
from what it journals: each job's events go through the same span mapper
(with a no-op tracer) that instruments operations, feeding a meter provider
read by Prometheus. The daemon adds jobs by state, journal throughput and
trimming, and stream subscribers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry import trace
from opentelemetry.metrics import CallbackOptions, Observation

from otel.span_mapper import SpanMapper
from sparkrun.core.operation import OperationInfo

__all__ = ["DaemonMetrics"]

_OUTCOMES = ("succeeded", "failed", "cancelled")


class DaemonMetrics:
    """A job observer of the daemon that also renders ``GET /metrics``."""

    def __init__(self, journal: Any, subscribers: Callable[[], int]) -> None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.resources import Resource
        from prometheus_client import CollectorRegistry

        from sparkrun import __version__

        self.registry = CollectorRegistry()
        provider = MeterProvider(
            metric_readers=[PrometheusMetricReader(registry=self.registry)],
            resource=Resource.create({"service.name": "sparkrun-daemon", "service.version": __version__}),
            shutdown_on_exit=False,
        )
        self._mapper = SpanMapper(trace.NoOpTracerProvider(), provider)
        self._journal = journal
        self._subscribers = subscribers
        meter = provider.get_meter("sparkrun.daemon", __version__)
        meter.create_observable_gauge(
            "sparkrun.daemon.jobs", callbacks=[self._jobs], unit="{job}", description="Jobs by state."
        )
        meter.create_observable_counter(
            "sparkrun.daemon.journal.events",
            callbacks=[lambda options: [Observation(journal.appended_total)]],
            unit="{event}",
            description="Events written to the journal.",
        )
        meter.create_observable_counter(
            "sparkrun.daemon.journal.trimmed",
            callbacks=[lambda options: [Observation(journal.trimmed_total)]],
            unit="{event}",
            description="Events dropped by the journal's bounds (oldest first).",
        )
        meter.create_observable_gauge(
            "sparkrun.daemon.stream.subscribers",
            callbacks=[lambda options: [Observation(subscribers())]],
            unit="{stream}",
            description="Event and log streams open now.",
        )

    def _jobs(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._journal.count_by_state()
        from sparkrun.daemon.journal import STATES

        return [Observation(counts.get(state, 0), {"state": state}) for state in STATES]

    # -- job observer -----------------------------------------------------------------

    def job_started(self, operation_id: str, operation: str, started_at: float) -> None:
        self._mapper.start(OperationInfo(operation_id, operation, started_at))

    def job_events(self, operation_id: str, events: list[dict[str, Any]]) -> None:
        for event in events:
            self._mapper.handle(operation_id, event)

    def job_finished(self, operation_id: str, state: str, finished_at: float) -> None:
        outcome = state if state in _OUTCOMES else None
        self._mapper.finish(operation_id, outcome, None, finished_at)  # type: ignore[arg-type]

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
