"""sparkrun's metrics through the OpenTelemetry metrics API.

Per-event counts and transferred bytes are summed in plain dicts and read
by observable counters at collection time, so a report costs a dict update
rather than an SDK call. Labels are low-cardinality names only (source,
level, status, outcome, operation name); an operation or activity id is
never a label.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable

from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

from otel.activity_tracker import Activity, ActivitySink
from otel.benchmark_metrics import BenchmarkMetrics
from otel.transfer_metrics import TransferMetrics
from sparkrun.core.events import FeedbackEvent

__all__ = ["DURATION_BUCKETS", "MetricsSink", "SparkrunMetrics"]

#: Seconds; launches, relays and benchmarks run for seconds to an hour.
DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600)


class SparkrunMetrics:
    """The instruments and the running sums behind the observable ones."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        from sparkrun import __version__

        meter: Meter = meter_provider.get_meter("sparkrun", __version__)
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str, str | None], int] = defaultdict(int)
        self._bytes: dict[tuple[str, str | None], int | float] = defaultdict(int)
        meter.create_observable_counter(
            "sparkrun.feedback.events",
            callbacks=[self._observe_events],
            unit="{event}",
            description="Feedback reports, by source, level and host.",
        )
        meter.create_observable_counter(
            "sparkrun.transfer.bytes",
            callbacks=[self._observe_bytes],
            unit="By",
            description="Bytes transferred, from counters whose unit is bytes, by source and host.",
        )
        self._coalesced = meter.create_counter(
            "sparkrun.feedback.coalesced",
            unit="{event}",
            description="Reports not kept as span events (coalesced within the span event limit), by source.",
        )
        self._activity_duration = meter.create_histogram(
            "sparkrun.activity.duration",
            unit="s",
            description="Activity durations, by source, final stage and final status.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._operation_duration = meter.create_histogram(
            "sparkrun.operation.duration",
            unit="s",
            description="Operation durations, by operation and outcome.",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self._active = meter.create_up_down_counter(
            "sparkrun.operations.active", unit="{operation}", description="Operations running now."
        )
        #: Benchmark figures, outcomes and attempt durations, from ``benchmark`` events.
        self.benchmarks = BenchmarkMetrics(meter)
        #: Reused bytes, outcomes and throughput, from the final ``verifying`` report of each transfer.
        self.transfers = TransferMetrics(meter)

    def count_event(self, source: str, level: str, host: str | None = None, transferred: int | float = 0) -> None:
        """Count one report, and the bytes it says were ``transferred`` since the last one (one lock per report)."""
        key = (source, level, host)
        with self._lock:
            self._events[key] += 1
            if transferred:
                self._bytes[(source, host)] += transferred

    def activity_ended(self, source: str, status: str, seconds: float, stage: str | None, coalesced: int) -> None:
        labels = {"sparkrun.source": source, "sparkrun.status": status, "sparkrun.stage": stage or "none"}
        self._activity_duration.record(seconds, labels)
        if coalesced:
            self._coalesced.add(coalesced, {"sparkrun.source": source})

    def operation_started(self, name: str) -> None:
        self._active.add(1, {"sparkrun.operation": name})

    def operation_ended(self, name: str, outcome: str, seconds: float) -> None:
        self._active.add(-1, {"sparkrun.operation": name})
        self._operation_duration.record(seconds, {"sparkrun.operation": name, "sparkrun.outcome": outcome})

    def _observe_events(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            counts = list(self._events.items())
        return [Observation(n, _labels(s, h, {"sparkrun.level": lv})) for (s, lv, h), n in counts]

    def _observe_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            sums = list(self._bytes.items())
        return [Observation(amount, _labels(source, host)) for (source, host), amount in sums]


def _labels(source: str, host: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    labels = {"sparkrun.source": source, **(extra or {})}
    if host is not None:
        labels["host.name"] = host
    return labels


class MetricsSink(ActivitySink):
    """Feeds :class:`SparkrunMetrics` from an :class:`~otel.activity_tracker.ActivityTracker`."""

    def __init__(self, metrics: SparkrunMetrics) -> None:
        self._metrics = metrics

    def counted(self, activity: Activity, event: FeedbackEvent, transferred: int | float) -> None:
        self._metrics.count_event(activity.source, event["level"], activity.host, transferred)
        self._metrics.transfers.report(
            activity.source, activity.host, event.get("stage"), event.get("status"), event.get("metrics")
        )

    def ended(self, activity: Activity, end_time: float, *, unfinished: bool) -> None:
        status = "unfinished" if unfinished else activity.status or "unknown"
        seconds = max(0.0, end_time - activity.started_at)
        self._metrics.activity_ended(activity.source, status, seconds, activity.stage, activity.coalesced)
