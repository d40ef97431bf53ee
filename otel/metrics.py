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

__all__ = ["SparkrunMetrics"]


class SparkrunMetrics:
    """The instruments and the running sums behind the observable ones."""

    def __init__(self, meter_provider: MeterProvider) -> None:
        from sparkrun import __version__

        meter: Meter = meter_provider.get_meter("sparkrun", __version__)
        self._lock = threading.Lock()
        self._events: dict[tuple[str, str], int] = defaultdict(int)
        self._bytes: dict[str, int | float] = defaultdict(int)
        meter.create_observable_counter(
            "sparkrun.feedback.events",
            callbacks=[self._observe_events],
            unit="{event}",
            description="Feedback reports, by source and level.",
        )
        meter.create_observable_counter(
            "sparkrun.transfer.bytes",
            callbacks=[self._observe_bytes],
            unit="By",
            description="Bytes transferred, from counters whose unit is bytes, by source.",
        )
        self._activity_duration = meter.create_histogram(
            "sparkrun.activity.duration", unit="s", description="Activity durations, by source and final status."
        )
        self._operation_duration = meter.create_histogram(
            "sparkrun.operation.duration", unit="s", description="Operation durations, by operation and outcome."
        )
        self._active = meter.create_up_down_counter(
            "sparkrun.operations.active", unit="{operation}", description="Operations running now."
        )

    def count_event(self, source: str, level: str) -> None:
        key = (source, level)
        with self._lock:
            self._events[key] += 1

    def add_bytes(self, source: str, amount: int | float) -> None:
        with self._lock:
            self._bytes[source] += amount

    def activity_ended(self, source: str, status: str, seconds: float) -> None:
        self._activity_duration.record(seconds, {"sparkrun.source": source, "sparkrun.status": status})

    def operation_started(self, name: str) -> None:
        self._active.add(1, {"sparkrun.operation": name})

    def operation_ended(self, name: str, outcome: str, seconds: float) -> None:
        self._active.add(-1, {"sparkrun.operation": name})
        self._operation_duration.record(seconds, {"sparkrun.operation": name, "sparkrun.outcome": outcome})

    def _observe_events(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            counts = list(self._events.items())
        return [Observation(n, {"sparkrun.source": s, "sparkrun.level": lv}) for (s, lv), n in counts]

    def _observe_bytes(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            sums = list(self._bytes.items())
        return [Observation(amount, {"sparkrun.source": source}) for source, amount in sums]
