"""Timed activities: spans at the real times a report's metrics give, whatever the reports' own timestamps."""

from __future__ import annotations

import json
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import otel
from otel.ids import OperationIdGenerator, activity_span_id
from otel.span_mapper import SpanMapper
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from sparkrun.foreign_spans import ForeignSpan, SpanImporter
from tests.conftest import drain

T0 = 1_700_000_000.0  # long before the reports: the real times must win over the reports' timestamps


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _close(ns: int, seconds: float) -> bool:
    """Within a microsecond: float Unix seconds carry about a quarter of one."""
    return abs(ns - _ns(seconds)) < 1_000


def test_a_terminal_report_with_started_at_and_duration_sets_the_spans_real_times(captured, sctx):
    with operation_scope(sctx, name="import"):
        feedback = get_feedback("controller")
        feedback.progress("working", status="running")
        feedback.progress("done", status="succeeded", metrics={"started_at": T0, "duration_seconds": 2.5})
    span = captured.span("controller")
    assert _close(span.start_time, T0) and _close(span.end_time, T0 + 2.5)
    assert span.status.status_code is StatusCode.OK
    assert [event.name for event in span.events] == ["sparkrun.feedback.progress"] * 2  # events keep their times


def test_started_at_on_the_first_report_and_duration_on_the_last(captured, sctx):
    with operation_scope(sctx, name="import"):
        feedback = get_feedback("controller")
        feedback.progress("started", status="running", metrics={"started_at": T0 + 1})
        feedback.progress("done", status="succeeded", metrics={"duration_seconds": 0.000250})
    span = captured.span("controller")
    assert _close(span.start_time, T0 + 1) and _close(span.end_time, T0 + 1.00025)


@pytest.mark.parametrize(
    "metrics",
    [
        {"duration_seconds": 3.0},  # no start: a plain metric
        {"started_at": 0, "duration_seconds": 3.0},
        {"started_at": -5.0, "duration_seconds": 3.0},
        {"started_at": True, "duration_seconds": 3.0},
        {"started_at": "1700000000", "duration_seconds": 3.0},
    ],
    ids=["duration-only", "zero", "negative", "bool", "text"],
)
def test_metrics_that_are_no_real_start_leave_the_report_times(captured, sctx, metrics):
    before = time.time()
    with operation_scope(sctx, name="import"):
        get_feedback("controller").progress("done", status="succeeded", metrics=metrics)
    span = captured.span("controller")
    assert span.start_time >= _ns(before) - 1_000 and span.end_time >= span.start_time
    assert span.end_time - span.start_time < 3_000_000_000


def test_a_negative_duration_ends_the_span_at_its_report(captured, sctx):
    with operation_scope(sctx, name="import"):
        get_feedback("controller").progress(
            "done", status="succeeded", metrics={"started_at": T0, "duration_seconds": -1}
        )
    span = captured.span("controller")
    assert _close(span.start_time, T0) and span.end_time > _ns(T0 + 1_000)


def test_children_of_a_timed_parent_point_at_its_derived_id(captured, sctx):
    with operation_scope(sctx, name="import") as operation:
        parent = get_feedback("controller")
        parent.progress("started", status="running", metrics={"started_at": T0})
        child = parent.child(source="controller.step")
        child.progress("step", status="succeeded", metrics={"started_at": T0 + 0.5, "duration_seconds": 0.25})
        parent.progress("done", status="succeeded", metrics={"duration_seconds": 1.0})
    oid = operation.operation_id
    parent_span, child_span = captured.span("controller"), captured.span("controller.step")
    assert parent_span.context.span_id == activity_span_id(oid, parent.activity_id)
    assert child_span.parent.span_id == parent_span.context.span_id
    assert _close(child_span.start_time, T0 + 0.5) and _close(child_span.end_time, T0 + 0.75)
    assert _close(parent_span.end_time, T0 + 1.0)


def test_with_random_ids_a_child_still_finds_its_timed_parent(sctx):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # a foreign provider: ids cannot be derived, so the parent starts early
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with operation_scope(sctx, name="import", observers=[SpanMapper(provider)]):
        parent = get_feedback("controller")
        parent.progress("started", status="running", metrics={"started_at": T0})
        parent.child(source="controller.step").progress("step", status="succeeded")
        parent.progress("done", status="succeeded", metrics={"duration_seconds": 1.0})
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert spans["controller.step"].parent.span_id == spans["controller"].context.span_id
    assert _close(spans["controller"].start_time, T0) and _close(spans["controller"].end_time, T0 + 1)
    assert len(spans["controller"].events) == 2


def test_an_unfinished_timed_activity_ends_with_the_operation_never_before_it_starts(captured, sctx):
    future = time.time() + 3600
    with operation_scope(sctx, name="import"):
        get_feedback("controller").progress("started", status="running", metrics={"started_at": future})
    span = captured.span("controller")
    assert span.attributes["sparkrun.unfinished"] is True
    assert span.end_time == span.start_time and _close(span.start_time, future)


def test_the_activity_duration_metric_is_the_real_duration(captured, sctx):
    with operation_scope(sctx, name="import"):
        get_feedback("controller").progress(
            "done", status="succeeded", metrics={"started_at": T0, "duration_seconds": 7.0}
        )
    (point,) = [
        p for p in captured.metrics()["sparkrun.activity.duration"] if p.attributes["sparkrun.source"] == "controller"
    ]
    assert point.sum == pytest.approx(7.0)


# -- the importer -----------------------------------------------------------------------------


def _import(sctx) -> tuple[str, str, list[dict]]:
    """A controller-like hierarchy on two clocks; returns the importing activity id, the operation id, the events."""
    with operation_scope(sctx, name="import") as operation:
        reporter = get_feedback("coldsnap")
        spans = SpanImporter(reporter, prefix="coldsnap")
        controller = ForeignSpan(
            "controller-1", "coldsnap.controller", T0, clock="controller", attributes={"phase": "execute"}
        )
        spans.started(controller)
        ready = ForeignSpan(
            "worker-0-1",
            "units.ready",
            T0 + 0.123456,
            parent="controller-1",
            host="spark-2",
            unit="unit-1",
            worker="worker-0",
            clock="worker-0",
        )
        spans.started(ready)
        spans.finished(ready.completed(1.5, failed=True, error="port closed"))
        spans.finished(
            ForeignSpan("controller-2", "artifact.write", T0 + 2, parent="controller-1", duration_seconds=0.004)
        )
        spans.finished(controller.completed(3.25))
        reporter.progress("done", status="succeeded")
    return reporter.activity_id, operation.operation_id, json.loads(json.dumps(drain(sctx.queue)))


def test_imported_spans_keep_their_hierarchy_times_identity_and_status(captured, sctx):
    importer_id, _, _ = _import(sctx)
    spans = {span.name: span for span in captured.spans()}
    controller, ready, write = (
        spans["coldsnap.controller"],
        spans["coldsnap.units.ready"],
        spans["coldsnap.artifact.write"],
    )
    assert controller.attributes["sparkrun.activity_id"] == f"{importer_id}/controller-1"
    assert controller.parent.span_id == spans["coldsnap"].context.span_id  # no foreign parent: the importer
    assert ready.parent.span_id == write.parent.span_id == controller.context.span_id
    assert _close(ready.start_time, T0 + 0.123456) and _close(ready.end_time, T0 + 1.623456)
    assert _close(controller.end_time, T0 + 3.25) and _close(write.end_time, T0 + 2.004)
    assert ready.status.status_code is StatusCode.ERROR and controller.status.status_code is StatusCode.OK
    assert ready.attributes["host.name"] == "spark-2"
    assert ready.attributes["sparkrun.metric.worker"] == "worker-0"  # the latest metrics are span attributes
    assert _close(round(ready.attributes["sparkrun.metric.started_at"] * 1e9), T0 + 0.123456)
    last = ready.events[-1].attributes
    assert last["sparkrun.metric.unit"] == "unit-1" and last["sparkrun.metric.worker"] == "worker-0"
    assert "port closed" in last["message"]
    assert controller.events[0].attributes["sparkrun.metric.phase"] == "execute"


def test_levels_announce_long_and_failed_spans_only(sctx):
    _, _, events = _import(sctx)
    levels = {(e["source"], e["status"]): e["level"] for e in events if e["source"].startswith("coldsnap.")}
    assert levels[("coldsnap.controller", "running")] == "debug"
    assert levels[("coldsnap.controller", "succeeded")] == "progress"  # 3.25 s
    assert levels[("coldsnap.units.ready", "failed")] == "error"
    assert levels[("coldsnap.artifact.write", "succeeded")] == "info"  # 4 ms: -v shows it


def test_replay_reproduces_the_imported_times_and_ids(captured, sctx):
    _, _, events = _import(sctx)
    live = {
        (s.context.span_id, s.parent.span_id if s.parent else None, s.start_time, s.end_time) for s in captured.spans()
    }
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=OperationIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.replay(events, tracer_provider=provider, name="import")
    replayed = {
        (s.context.span_id, s.parent.span_id if s.parent else None, s.start_time, s.end_time)
        for s in exporter.get_finished_spans()
    }
    timed = {row for row in live if row[2] < _ns(T0 + 10)}
    assert len(timed) == 3 and timed <= replayed


def test_a_child_imported_before_its_parent_is_adopted_by_it(captured, sctx):
    with operation_scope(sctx, name="import"):
        spans = SpanImporter(get_feedback("bench"), prefix="benchmark")
        spans.finished(ForeignSpan("a-2", "attempt", T0 + 1, parent="a-1", duration_seconds=0.5))
        spans.finished(ForeignSpan("a-1", "schedule", T0, duration_seconds=2.0))
    child, parent = captured.span("benchmark.attempt"), captured.span("benchmark.schedule")
    assert child.parent.span_id == parent.context.span_id and _close(parent.start_time, T0)


@pytest.mark.parametrize(
    ("call", "span", "problem"),
    [
        ("finished", ForeignSpan("x", "n", T0), "needs a finite duration"),
        ("finished", ForeignSpan("x", "n", T0, duration_seconds=float("nan")), "needs a finite duration"),
        ("finished", ForeignSpan("x", "n", T0, duration_seconds=-0.5), "needs a finite duration"),
    ],
)
def test_bad_spans_are_refused_with_the_field(sctx, call, span, problem):
    with operation_scope(sctx, name="import"):
        spans = SpanImporter(get_feedback("coldsnap"), prefix="coldsnap")
        with pytest.raises(ValueError, match=problem):
            getattr(spans, call)(span)


def test_a_span_is_imported_once(sctx):
    with operation_scope(sctx, name="import"):
        spans = SpanImporter(get_feedback("coldsnap"), prefix="coldsnap")
        spans.started(ForeignSpan("x", "n", T0))
        with pytest.raises(ValueError, match="already imported"):
            spans.started(ForeignSpan("x", "n", T0))
        spans.finished(ForeignSpan("x", "n", T0, duration_seconds=1))
        with pytest.raises(ValueError, match="already finished"):
            spans.finished(ForeignSpan("x", "n", T0, duration_seconds=1))


def test_attributes_beyond_the_metric_budget_are_counted_not_lost_silently(sctx):
    attributes = {f"a{i}": "v" for i in range(40)} | {"unit": "ignored", "k" * 200: "too long a key"}
    with operation_scope(sctx, name="import"):
        SpanImporter(get_feedback("coldsnap"), prefix="coldsnap").finished(
            ForeignSpan("x", "n", T0, duration_seconds=1, unit="unit-0", attributes=attributes)
        )
    (event,) = [e for e in drain(sctx.queue) if e.get("source") == "coldsnap.n"]
    metrics = event["metrics"]
    assert len(metrics) == 32 and metrics["unit"] == "unit-0"
    assert metrics["dropped_attributes"] == 13  # 3 of ours + 28 attributes fit; 12 more and the long key do not


def test_foreign_text_that_could_redraw_a_terminal_is_made_printable(sctx):
    with operation_scope(sctx, name="import"):
        SpanImporter(get_feedback("coldsnap"), prefix="coldsnap").finished(
            ForeignSpan(
                "x\x1b",
                "evil\x1b[2J",
                T0,
                duration_seconds=0.5,
                failed=True,
                error="bad\rline\ud800",
                host="h\x07",
                attributes={"note": "a\x1b]0;title\x07"},
            )
        )
    (event,) = [e for e in drain(sctx.queue) if e.get("source", "").startswith("coldsnap.")]
    assert event["source"] == "coldsnap.evil\ufffd[2J" and event["host"] == "h\ufffd"
    assert event["activity_id"].endswith("/x\ufffd")
    assert event["message"] == "evil\ufffd[2J failed after 500.0 ms: bad\ufffdline\ufffd"
    assert event["metrics"]["note"] == "a\ufffd]0;title\ufffd"
