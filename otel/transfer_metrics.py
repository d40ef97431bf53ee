"""Verified transfers as metrics: bytes a receiver already had, outcomes, and the throughput each achieved.

An image relay (``oci-relay``) or a model copy (``model-copy``) ends each
receiver host's activity with a final ``verifying`` report whose status is
``succeeded`` or ``failed`` and whose metrics carry ``wire_bytes`` (bytes
sent to that host), ``reused_bytes`` (bytes the host already had) and
``bytes_per_second`` (wire bytes over transfer seconds). Any source that
reports this shape is counted the same way. The bytes on the wire are
already in ``sparkrun.transfer.bytes`` (from the byte counters), so they are
not counted again here.

Labels are the source and the host, as ``sparkrun.transfer.bytes`` has them,
plus the outcome; an operation or activity id is never a label. A report
costs a dict update under a lock; observable instruments read the sums at
collection time.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping

from opentelemetry.metrics import CallbackOptions, Meter, Observation

__all__ = ["FINAL_STAGE", "TransferMetrics"]

#: The stage of a transfer's final report per host.
FINAL_STAGE = "verifying"
_OUTCOMES = frozenset({"succeeded", "failed"})

_Key = tuple[str, str | None]  # (source, host)


def _amount(value: object) -> float | None:
    """``value`` as a non-negative number, else None (a boolean is not a number here)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class TransferMetrics:
    """``sparkrun.transfer.reused`` and ``.verified`` (counters) and ``.throughput`` (gauge)."""

    def __init__(self, meter: Meter) -> None:
        self._lock = threading.Lock()
        self._reused: dict[_Key, int | float] = defaultdict(int)
        self._verified: dict[tuple[str, str | None, str], int] = defaultdict(int)
        self._throughput: dict[_Key, float] = {}
        meter.create_observable_counter(
            "sparkrun.transfer.reused",
            callbacks=[self._observe_reused],
            unit="By",
            description="Bytes a receiver already had and so were not sent, from final transfer reports, "
            "by source and host.",
        )
        meter.create_observable_counter(
            "sparkrun.transfer.verified",
            callbacks=[self._observe_verified],
            unit="{transfer}",
            description="Transfers that reached their final verification, by source, host and outcome.",
        )
        meter.create_observable_gauge(
            "sparkrun.transfer.throughput",
            callbacks=[self._observe_throughput],
            unit="By/s",
            description="Wire bytes per transfer second of the last succeeded transfer, by source and host.",
        )

    def report(
        self, source: str, host: str | None, stage: str | None, status: str | None, metrics: Mapping[str, object] | None
    ) -> None:
        """Take one feedback report; only a final ``verifying`` report with ``wire_bytes`` counts.

        A failed transfer counts as verified ``failed`` and adds the bytes its host
        reused, but leaves the throughput gauge at the last succeeded transfer's: a
        transfer cut short would show a rate nobody got.
        """
        if stage != FINAL_STAGE or status not in _OUTCOMES or not metrics or _amount(metrics.get("wire_bytes")) is None:
            return
        reused = _amount(metrics.get("reused_bytes"))
        rate = _amount(metrics.get("bytes_per_second")) if status == "succeeded" else None
        with self._lock:
            self._verified[(source, host, status)] += 1
            if reused is not None:  # a host that reused nothing still has its series, at 0
                self._reused[(source, host)] += reused
            if rate is not None:
                self._throughput[(source, host)] = float(rate)

    def _observe_reused(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            sums = list(self._reused.items())
        return [Observation(amount, _labels(source, host)) for (source, host), amount in sums]

    def _observe_verified(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            counts = list(self._verified.items())
        return [Observation(count, _labels(source, host, outcome)) for (source, host, outcome), count in counts]

    def _observe_throughput(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            rates = list(self._throughput.items())
        return [Observation(rate, _labels(source, host)) for (source, host), rate in rates]


def _labels(source: str, host: str | None, outcome: str | None = None) -> dict[str, str]:
    """The label names of ``sparkrun.transfer.bytes`` (and ``sparkrun.outcome`` as operations have it)."""
    labels = {"sparkrun.source": source}
    if host is not None:
        labels["host.name"] = host
    if outcome is not None:
        labels["sparkrun.outcome"] = outcome
    return labels
