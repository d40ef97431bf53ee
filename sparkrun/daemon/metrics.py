"""The daemon's Prometheus endpoint: the adapter's metrics for every job, and the daemon's own.

Jobs run in worker processes, so the daemon rebuilds the adapter's metrics
from what it journals: each job's events go through the adapter's activity
tracker with its metrics sink alone (no spans are made here; the workers
export those), feeding a meter provider read by Prometheus. The daemon adds
jobs by state, journal throughput and trimming, and stream subscribers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from opentelemetry.metrics import CallbackOptions, Observation

from otel.activity_tracker import ActivityTracker
from otel.metrics import MetricsSink, SparkrunMetrics
from otel.span_mapper import DEFAULT_EVENT_LIMIT
from sparkrun.core.events import Event
from sparkrun.daemon.journal import STATES, Journal

__all__ = ["DaemonMetrics"]

_OUTCOMES = ("succeeded", "failed", "cancelled")


class DaemonMetrics:
    """A job observer of the daemon that also renders ``GET /metrics``."""

    def __init__(self, journal: Journal, subscribers: Callable[[], int]) -> None:
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
        self._metrics = SparkrunMetrics(provider)
        self._jobs_running: dict[str, tuple[ActivityTracker, str, float]] = {}  # operation id -> (..., name, start)
        self._journal = journal
        self._subscribers = subscribers
        meter = provider.get_meter("sparkrun.daemon", __version__)
        meter.create_observable_gauge(
            "sparkrun.daemon.jobs", callbacks=[self._job_states], unit="{job}", description="Jobs by state."
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

    def _job_states(self, options: CallbackOptions) -> Iterable[Observation]:
        counts = self._journal.count_by_state()
        return [Observation(counts.get(state, 0), {"state": state}) for state in STATES]

    # -- job observer -----------------------------------------------------------------

    def job_started(self, operation_id: str, operation: str, started_at: float) -> None:
        tracker = ActivityTracker([MetricsSink(self._metrics)], event_limit=DEFAULT_EVENT_LIMIT)
        self._jobs_running[operation_id] = (tracker, operation, started_at)
        self._metrics.operation_started(operation)

    def job_events(self, operation_id: str, events: list[Event]) -> None:
        running = self._jobs_running.get(operation_id)
        if running is None:
            return
        for event in events:
            if event["type"] == "feedback":
                running[0].feedback(event)
            elif event["type"] == "benchmark":
                self._metrics.benchmarks.event(event)

    def job_finished(self, operation_id: str, state: str, finished_at: float) -> None:
        running = self._jobs_running.pop(operation_id, None)
        if running is None:
            return
        tracker, operation, started_at = running
        tracker.finish(finished_at)
        outcome = state if state in _OUTCOMES else "unknown"
        self._metrics.operation_ended(operation, outcome, max(0.0, finished_at - started_at))

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)
