"""Reused bytes, verified outcomes and throughput from the final reports of relays and model copies."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel.transfer_metrics import TransferMetrics
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import FeedbackReporter, get_feedback

MiB = 1_048_576


def _transfer(receiver: FeedbackReporter, *, status: str, wire: int, reused: int, rate: float, **extra: Any) -> None:
    """A receiver's stages as the image relay reports them, ending in a final ``verifying`` report."""
    receiver.progress("checking", stage="checking", status="running", log_message=False)
    receiver.progress("discovering", stage="discovering", log_message=False)
    for sent in (wire // 2, wire):
        receiver.progress(
            "transferring",
            stage="transferring",
            current=sent,
            total=wire + MiB,
            total_kind="upper_bound",
            unit="bytes",
            metrics={"bytes_per_second": rate, **extra},
            log_message=False,
        )
    receiver.progress("importing", stage="importing", log_message=False)
    metrics = {"wire_bytes": wire, "reused_bytes": reused, "bytes_per_second": rate, "duration_seconds": 2.5, **extra}
    receiver.progress(f"verification {status}", stage="verifying", status=status, metrics=metrics, log_message=False)


def _by_labels(points: list[Any]) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(point.attributes.items())): point.value for point in points}


def _labels(source: str, host: str, **extra: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"sparkrun.source": source, "host.name": host, **extra}.items()))


def test_a_relay_to_two_hosts_counts_reuse_outcomes_and_the_succeeded_throughput(captured, sctx):
    with operation_scope(sctx, name="image_relay") as operation:
        relay = get_feedback("oci-relay")
        relay.progress("relaying", stage="plan", status="running")
        ok, bad = relay.child(host="spark-1"), relay.child(host="spark-2")
        _transfer(ok, status="succeeded", wire=3 * MiB, reused=5 * MiB, rate=2 * MiB, reused_layers=4)
        _transfer(bad, status="failed", wire=MiB, reused=2 * MiB, rate=0.5 * MiB, reused_layers=1)
        relay.progress("relayed", status="succeeded")
    metrics = captured.metrics()
    assert _by_labels(metrics["sparkrun.transfer.reused"]) == {
        _labels("oci-relay", "spark-1"): 5 * MiB,
        _labels("oci-relay", "spark-2"): 2 * MiB,
    }
    assert _by_labels(metrics["sparkrun.transfer.verified"]) == {
        _labels("oci-relay", "spark-1", **{"sparkrun.outcome": "succeeded"}): 1,
        _labels("oci-relay", "spark-2", **{"sparkrun.outcome": "failed"}): 1,
    }
    # the failed host's rate is of a transfer cut short: the gauge keeps succeeded transfers only
    assert _by_labels(metrics["sparkrun.transfer.throughput"]) == {_labels("oci-relay", "spark-1"): 2 * MiB}
    # the wire bytes stay counted once, from the byte counters
    assert _by_labels(metrics["sparkrun.transfer.bytes"]) == {
        _labels("oci-relay", "spark-1"): 3 * MiB,
        _labels("oci-relay", "spark-2"): MiB,
    }
    ids = {operation.operation_id, relay.activity_id, ok.activity_id, bad.activity_id}
    for name in ("sparkrun.transfer.reused", "sparkrun.transfer.verified", "sparkrun.transfer.throughput"):
        for point in metrics[name]:
            assert not ids & {str(value) for value in point.attributes.values()}, (name, point.attributes)


def test_a_model_copy_with_reused_files_is_counted_under_its_own_source(captured, sctx):
    with operation_scope(sctx, name="model_copy"):
        copy = get_feedback("model-copy")
        _transfer(copy.child(host="spark-1"), status="succeeded", wire=MiB, reused=0, rate=MiB, reused_files=0)
    metrics = captured.metrics()
    assert _by_labels(metrics["sparkrun.transfer.reused"]) == {_labels("model-copy", "spark-1"): 0}
    assert _by_labels(metrics["sparkrun.transfer.verified"]) == {
        _labels("model-copy", "spark-1", **{"sparkrun.outcome": "succeeded"}): 1
    }
    assert _by_labels(metrics["sparkrun.transfer.throughput"]) == {_labels("model-copy", "spark-1"): MiB}


def test_the_throughput_gauge_is_the_last_succeeded_transfer_per_host(captured, sctx):
    with operation_scope(sctx, name="image_relay"):
        relay = get_feedback("oci-relay")
        _transfer(relay.child(host="spark-1"), status="succeeded", wire=MiB, reused=0, rate=100.0)
        _transfer(relay.child(host="spark-1"), status="succeeded", wire=MiB, reused=MiB, rate=300.0)
        _transfer(relay.child(host="spark-1"), status="failed", wire=MiB, reused=0, rate=5.0)
    metrics = captured.metrics()
    assert _by_labels(metrics["sparkrun.transfer.throughput"]) == {_labels("oci-relay", "spark-1"): 300.0}
    assert _by_labels(metrics["sparkrun.transfer.reused"]) == {_labels("oci-relay", "spark-1"): MiB}
    assert _by_labels(metrics["sparkrun.transfer.verified"]) == {
        _labels("oci-relay", "spark-1", **{"sparkrun.outcome": "succeeded"}): 2,
        _labels("oci-relay", "spark-1", **{"sparkrun.outcome": "failed"}): 1,
    }


def test_a_final_report_repeated_after_the_activity_ended_is_not_counted_again(captured, sctx):
    final = {"wire_bytes": MiB, "reused_bytes": MiB, "bytes_per_second": 10.0}
    with operation_scope(sctx, name="image_relay"):
        receiver = get_feedback("oci-relay").child(host="spark-1")
        receiver.progress("verified", stage="verifying", status="succeeded", metrics=final)
        receiver.progress("verified again", stage="verifying", status="succeeded", metrics=final)
    metrics = captured.metrics()
    assert [point.value for point in metrics["sparkrun.transfer.verified"]] == [1]
    assert [point.value for point in metrics["sparkrun.transfer.reused"]] == [MiB]


def _read(transfers_reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    data = transfers_reader.get_metrics_data()
    for resource_metrics in data.resource_metrics if data else ():
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                found[metric.name] = list(metric.data.data_points)
    return found


def test_reports_other_than_a_final_verifying_one_with_wire_bytes_are_ignored():
    reader = InMemoryMetricReader()
    transfers = TransferMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    final = {"wire_bytes": 10, "reused_bytes": 20, "bytes_per_second": 5.0}
    transfers.report("oci-relay", "spark-1", "verifying", "running", final)  # not final yet
    transfers.report("oci-relay", "spark-1", "verifying", "skipped", final)  # not an outcome of a transfer
    transfers.report("oci-relay", "spark-1", "transferring", "succeeded", final)  # another stage
    transfers.report("oci-relay", "spark-1", "verifying", "succeeded", None)  # no metrics
    transfers.report("oci-relay", "spark-1", "verifying", "succeeded", {"reused_bytes": 20})  # no wire_bytes
    transfers.report("oci-relay", "spark-1", "verifying", "succeeded", {**final, "wire_bytes": True})
    transfers.report("oci-relay", "spark-1", "verifying", "succeeded", {**final, "wire_bytes": "10"})
    assert _read(reader) == {}


def test_a_final_report_without_reuse_or_rate_still_counts_its_outcome():
    reader = InMemoryMetricReader()
    transfers = TransferMetrics(MeterProvider(metric_readers=[reader]).get_meter("test"))
    transfers.report("oci-relay", None, "verifying", "succeeded", {"wire_bytes": 0, "bytes_per_second": -1})
    metrics = _read(reader)
    assert set(metrics) == {"sparkrun.transfer.verified"}
    (point,) = metrics["sparkrun.transfer.verified"]
    assert dict(point.attributes) == {"sparkrun.source": "oci-relay", "sparkrun.outcome": "succeeded"}
