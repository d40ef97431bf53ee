"""Span events recorded directly are exactly what the SDK's add_event records."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel.span_events import MAX_REPORT_ATTRIBUTES, add_event, direct_events_possible
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback

REPORTS = [
    {"message": "Receiving missing layers"},
    {
        "message": "Receiving missing layers",
        "sparkrun.stage": "transfer",
        "sparkrun.status": "running",
        "sparkrun.current": 1048576,
        "sparkrun.total": 4194304.5,
        "sparkrun.total_kind": "upper_bound",
        "sparkrun.unit": "bytes",
    },
    {"message": "x" * 16_384, "sparkrun.metric.ok": True, "sparkrun.metric.rate": -0.25, "sparkrun.metric.note": ""},
    {"message": "many metrics", **{f"sparkrun.metric.m{i}": i for i in range(MAX_REPORT_ATTRIBUTES - 1)}},
]


def _events(limits: SpanLimits | None, record) -> list:
    provider = TracerProvider(span_limits=limits) if limits else TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    span = provider.get_tracer("test").start_span("s")
    for number, attributes in enumerate(REPORTS):
        record(provider, span, "sparkrun.feedback.progress", dict(attributes), 1_700_000_000_000_000_000 + number)
    span.end()
    (finished,) = exporter.get_finished_spans()
    return [(e.name, e.timestamp, dict(e.attributes), e.dropped_attributes) for e in finished.events]


def _direct(provider, span, name, attributes, timestamp) -> None:
    add_event(span, name, attributes, timestamp, direct=direct_events_possible(provider))


def _sdk(provider, span, name, attributes, timestamp) -> None:
    span.add_event(name, attributes, timestamp)


@pytest.mark.parametrize(
    "limits",
    [None, SpanLimits(max_attribute_length=8), SpanLimits(max_event_attributes=5)],
    ids=["defaults", "value-length-limit", "attribute-count-limit"],
)
def test_recorded_events_equal_the_sdks_under_any_limits(limits):
    assert _events(limits, _direct) == _events(limits, _sdk)


def test_the_direct_path_is_taken_only_when_limits_change_nothing():
    assert direct_events_possible(TracerProvider())
    assert not direct_events_possible(TracerProvider(span_limits=SpanLimits(max_attribute_length=100_000)))
    assert not direct_events_possible(TracerProvider(span_limits=SpanLimits(max_event_attributes=10)))
    assert direct_events_possible(TracerProvider(span_limits=SpanLimits(max_event_attributes=MAX_REPORT_ATTRIBUTES)))
    assert not direct_events_possible(trace.NoOpTracerProvider())


def test_values_that_are_not_plain_scalars_are_cleaned_by_the_sdk():
    provider = TracerProvider()
    span = provider.get_tracer("test").start_span("s")
    add_event(span, "e", {"message": "m", "sparkrun.metric.list": [1, 2]}, 1, direct=True)
    (event,) = span.events
    assert event.attributes["sparkrun.metric.list"] == (1, 2)  # the SDK's copy, not the caller's list


def test_directly_recorded_attributes_are_read_only():
    span = TracerProvider().get_tracer("test").start_span("s")
    add_event(span, "e", {"message": "m"}, 1, direct=True)
    (event,) = span.events
    with pytest.raises(TypeError):
        event.attributes["message"] = "changed"  # type: ignore[index]


def test_an_ended_span_takes_no_more_events():
    span = TracerProvider().get_tracer("test").start_span("s")
    span.end()
    add_event(span, "e", {"message": "late"}, 1, direct=True)
    assert span.events == ()


def test_a_value_length_limit_applies_to_report_events(sctx):
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_attribute_length=8))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    from otel import SparkrunInstrumentor

    instrumentor = SparkrunInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        with operation_scope(sctx, name="relay"):
            get_feedback("oci-relay").progress("Receiving missing layers", stage="transfer")
    finally:
        instrumentor.uninstrument()
    (span,) = [span for span in exporter.get_finished_spans() if span.name == "oci-relay"]
    assert dict(span.events[0].attributes) == {"message": "Receivin", "sparkrun.stage": "transfer"}
