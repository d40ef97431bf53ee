"""The Phoenix harness itself: spans exported over OTLP/HTTP and OTLP/gRPC can be read back."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from tests.integration.phoenix import PhoenixServer

pytestmark = pytest.mark.integration


class _Recording(SpanExporter):
    """Keeps each export's result: SimpleSpanProcessor only logs a failed export."""

    def __init__(self, inner: SpanExporter) -> None:
        self.inner = inner
        self.results: list[SpanExportResult] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.inner.export(spans)
        self.results.append(result)
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _export_one_span(exporter: SpanExporter, name: str) -> str:
    """Export one span in a fresh random trace; return its trace id as Phoenix spells it."""
    recording = _Recording(exporter)
    provider = TracerProvider(resource=Resource.create({"service.name": "sparkrun-tests"}))
    provider.add_span_processor(SimpleSpanProcessor(recording))
    try:
        with provider.get_tracer(__name__).start_as_current_span(name) as span:
            trace_id = span.get_span_context().trace_id
        assert provider.force_flush()
    finally:
        provider.shutdown()
    assert recording.results == [SpanExportResult.SUCCESS]
    return f"{trace_id:032x}"


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_span_exported_over_otlp_is_read_back(phoenix: PhoenixServer, transport: str) -> None:
    if transport == "http":
        exporter: SpanExporter = HttpSpanExporter(endpoint=f"{phoenix.http_endpoint}/v1/traces")
    else:
        exporter = GrpcSpanExporter(endpoint=phoenix.grpc_endpoint, insecure=True)
    name = f"harness-{transport}"

    trace_id = _export_one_span(exporter, name)

    [span] = phoenix.spans(trace_id)
    assert span["name"] == name
    assert span["context"]["trace_id"] == trace_id
