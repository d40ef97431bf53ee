"""The adapter never changes, slows or fails native delivery."""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter, SpanExportResult

from otel import SparkrunInstrumentor
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from tests.conftest import drain


def _produce(sctx, count: int = 200) -> list[dict]:
    returned = []
    with operation_scope(sctx, name="relay"):
        reporter = get_feedback("oci-relay").child(host="spark-1")
        returned.append(reporter.progress("start", stage="transfer", status="running", log_message=False))
        for i in range(count):
            returned.append(
                reporter.progress("tick", current=i, total=count, total_kind="exact", unit="bytes", log_message=False)
            )
        returned.append(reporter.warning("slow", log_message=False))
        returned.append(reporter.progress("done", status="succeeded", log_message=False))
    return returned


def _shape(events: list[dict]) -> list[tuple]:
    return [(e["type"], e["message"], e["level"], e.get("current"), e.get("status")) for e in events]


def test_same_envelopes_in_the_same_order_with_and_without_instrumentation(captured, sctx):
    instrumented_returned = _produce(sctx)
    instrumented = drain(sctx.queue)
    SparkrunInstrumentor().uninstrument()
    plain_returned = _produce(sctx)
    plain = drain(sctx.queue)
    assert all(a is b for a, b in zip(instrumented, instrumented_returned, strict=True))  # untouched objects
    assert all(a is b for a, b in zip(plain, plain_returned, strict=True))
    assert _shape(instrumented) == _shape(plain)
    assert "metrics" not in instrumented[0] and all(set(e) == set(p) for e, p in zip(instrumented, plain, strict=True))


class _RaisingExporter(SpanExporter):
    def export(self, spans):
        raise RuntimeError("exporter bug")

    def shutdown(self):
        pass


class _HangingExporter(SpanExporter):
    def __init__(self):
        self.release = threading.Event()
        self.entered = threading.Event()
        self.returned = threading.Event()

    def export(self, spans):
        self.entered.set()
        self.release.wait(60)
        self.returned.set()
        return SpanExportResult.SUCCESS

    def shutdown(self):
        self.release.set()


def _instrumented_with(processor) -> TracerProvider:
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(processor)
    SparkrunInstrumentor().instrument(tracer_provider=provider)
    return provider


def test_an_exporter_that_raises_does_not_fail_the_operation(sctx):
    _instrumented_with(SimpleSpanProcessor(_RaisingExporter()))
    try:
        returned = _produce(sctx)
    finally:
        SparkrunInstrumentor().uninstrument()
    assert drain(sctx.queue) == returned


def test_an_exporter_that_hangs_does_not_block_the_operation(sctx):
    exporter = _HangingExporter()
    _instrumented_with(BatchSpanProcessor(exporter, schedule_delay_millis=1, max_export_batch_size=1))
    try:
        _produce(sctx, count=10)
        assert exporter.entered.wait(60)  # the exporter is now stuck in export()
        returned = _produce(sctx, count=2000)
        # The operation finished while the exporter was still stuck: it never waited for the export.
        finished_while_stuck = not exporter.returned.is_set()
    finally:
        SparkrunInstrumentor().uninstrument()
        exporter.release.set()
    assert len(drain(sctx.queue)) == 2 * 3 + 10 + 2000 and returned[-1]["status"] == "succeeded"
    assert finished_while_stuck
