"""In-memory OpenTelemetry providers with the instrumentor attached."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel import SparkrunInstrumentor
from otel.ids import OperationIdGenerator


@dataclass
class Captured:
    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def span(self, name: str) -> ReadableSpan:
        (match,) = [span for span in self.spans() if span.name == name]
        return match

    def metrics(self) -> dict[str, list]:
        found: dict[str, list] = {}
        data = self.reader.get_metrics_data()
        for resource_metrics in data.resource_metrics if data else ():
            for scope_metrics in resource_metrics.scope_metrics:
                for metric in scope_metrics.metrics:
                    found[metric.name] = list(metric.data.data_points)
        return found


@pytest.fixture
def captured():
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider(id_generator=OperationIdGenerator())
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    instrumentor = SparkrunInstrumentor()
    instrumentor.instrument(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Captured(exporter, reader, tracer_provider, meter_provider)
    finally:
        instrumentor.uninstrument()
