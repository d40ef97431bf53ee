"""The mapping rules from native events to spans, each tested."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.trace import StatusCode

from otel.ids import OperationIdGenerator, activity_span_id, root_span_id
from sparkrun.core.operation import operation_scope
from sparkrun.errors import OperationCancelled
from sparkrun.feedback import get_feedback
from tests.conftest import SPEC_TRANSFER


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def test_root_span_per_operation(captured, sctx):
    with operation_scope(sctx, name="relay") as operation:
        pass
    root = captured.span("sparkrun.relay")
    assert _hex(root.context.trace_id, 32) == operation.operation_id
    assert root.context.span_id == root_span_id(operation.operation_id)
    assert root.parent is None
    assert root.attributes["sparkrun.operation_id"] == operation.operation_id
    assert root.status.status_code is StatusCode.OK and root.attributes["sparkrun.outcome"] == "succeeded"


def test_failed_operation_root_is_error_with_type(captured, sctx):
    with pytest.raises(KeyError), operation_scope(sctx, name="run"):
        raise KeyError("no such recipe")
    root = captured.span("sparkrun.run")
    assert root.status.status_code is StatusCode.ERROR and root.attributes["error.type"] == "KeyError"
    assert any(event.name == "exception" for event in root.events)


def test_cancelled_operation_root_is_unset(captured, sctx):
    with pytest.raises(OperationCancelled), operation_scope(sctx, name="run") as operation:
        operation.cancel()
        operation.raise_if_cancelled()
    root = captured.span("sparkrun.run")
    assert root.status.status_code is StatusCode.UNSET and root.attributes["sparkrun.outcome"] == "cancelled"


def test_activity_span_named_by_source_with_deterministic_id(captured, sctx):
    with operation_scope(sctx, name="relay") as operation:
        parent = get_feedback("oci-relay")
        parent.progress("planning", stage="plan")
        child = parent.child(host="spark-1")
        child.progress("receiving", stage="transfer", current=10, total=100, total_kind="exact", unit="bytes")
        child.progress(
            "verifying", stage="verify", current=100, total=100, total_kind="exact", unit="bytes", status="succeeded"
        )
    oid = operation.operation_id
    spans = {span.context.span_id: span for span in captured.spans()}
    child_span = spans[activity_span_id(oid, child.activity_id)]
    parent_span = spans[activity_span_id(oid, parent.activity_id)]
    assert child_span.name == "oci-relay" and parent_span.name == "oci-relay"
    assert child_span.parent.span_id == parent_span.context.span_id
    assert parent_span.parent.span_id == root_span_id(oid)
    assert child_span.attributes["host.name"] == "spark-1"
    assert child_span.attributes["sparkrun.stage"] == "verify"  # latest
    assert child_span.attributes["sparkrun.current"] == 100 and child_span.attributes["sparkrun.total"] == 100
    assert child_span.attributes["sparkrun.total_kind"] == "exact" and child_span.attributes["sparkrun.unit"] == "bytes"
    assert child_span.attributes["sparkrun.activity_id"] == child.activity_id


def test_a_parent_that_never_reported_still_gets_a_span(captured, sctx):
    with operation_scope(sctx, name="relay"):
        silent = get_feedback("coldsnap")
        silent.child(host="h1").progress("only the child reports")
    spans = captured.spans()
    ids = {span.context.span_id for span in spans}
    assert all(span.parent is None or span.parent.span_id in ids for span in spans)
    synthesized = [span for span in spans if span.attributes.get("sparkrun.synthesized")]
    assert len(synthesized) == 1 and synthesized[0].attributes["sparkrun.activity_id"] == silent.activity_id


def test_each_report_is_a_span_event_with_its_fields(captured, sctx):
    with operation_scope(sctx, name="relay"):
        get_feedback("oci-relay").progress(
            "Receiving missing layers",
            **{**SPEC_TRANSFER, "metrics": {**SPEC_TRANSFER["metrics"], "note": "warm", "skip": None}},
        )
    (event,) = captured.span("oci-relay").events
    assert event.name == "sparkrun.feedback.progress"
    assert dict(event.attributes) == {
        "message": "Receiving missing layers",
        "sparkrun.stage": "transfer",
        "sparkrun.status": "running",
        "sparkrun.current": 1048576,
        "sparkrun.total": 4194304,
        "sparkrun.total_kind": "upper_bound",
        "sparkrun.unit": "bytes",
        "sparkrun.metric.bytes_per_second": 524288,
        "sparkrun.metric.reused_layers": 2,
        "sparkrun.metric.note": "warm",
    }


@pytest.mark.parametrize(
    ("status", "code"), [("succeeded", StatusCode.OK), ("failed", StatusCode.ERROR), ("skipped", StatusCode.UNSET)]
)
def test_terminal_status_ends_the_span(captured, sctx, status, code):
    with operation_scope(sctx, name="relay"):
        reporter = get_feedback("step")
        reporter.progress("start", status="running")
        reporter.report("done", level="error" if status == "failed" else "progress", status=status)
        span = captured.span("step")  # already exported: ended at its terminal report
    assert span.status.status_code is code and span.attributes["sparkrun.status"] == status
    if status == "failed":
        assert span.attributes["error.type"] == "failed" and span.status.description == "done"


def test_failed_status_takes_error_type_from_metrics(captured, sctx):
    with operation_scope(sctx, name="relay"):
        get_feedback("step").error("disk full", status="failed", metrics={"error_type": "OSError"})
    assert captured.span("step").attributes["error.type"] == "OSError"


def test_open_spans_end_with_the_operation_marked_unfinished(captured, sctx):
    with operation_scope(sctx, name="relay"):
        get_feedback("step").progress("never finishes", status="running")
    span = captured.span("step")
    assert span.attributes["sparkrun.unfinished"] is True and span.status.status_code is StatusCode.UNSET
    assert span.end_time <= captured.span("sparkrun.relay").end_time


def test_reports_after_an_activity_ended_go_to_the_root(captured, sctx):
    with operation_scope(sctx, name="relay"):
        reporter = get_feedback("step")
        reporter.progress("done", status="succeeded")
        reporter.progress("afterthought")
    late = [e for e in captured.span("sparkrun.relay").events if e.attributes.get("sparkrun.late")]
    assert [e.attributes["message"] for e in late] == ["afterthought"]


def test_foreign_activity_ids_do_not_collide(captured, sctx):
    with operation_scope(sctx, name="coldsnap") as operation:
        first, second = get_feedback("coldsnap"), get_feedback("coldsnap")
        for reporter in (first, second):
            controller = reporter.child(activity_id=f"{reporter.activity_id}.span-1")
            controller.progress("outer", status="running")
            controller.child(activity_id=f"{reporter.activity_id}.span-2").progress("inner", status="succeeded")
            controller.progress("outer done", status="succeeded")
    oid = operation.operation_id
    span_ids = [span.context.span_id for span in captured.spans()]
    assert len(span_ids) == len(set(span_ids)) == 7  # root + 2 x (reporter, controller, inner)
    for reporter in (first, second):
        assert activity_span_id(oid, f"{reporter.activity_id}.span-2") in span_ids


def test_log_events_become_root_span_events(captured, sctx):
    import logging

    with operation_scope(sctx, name="relay"):
        logging.getLogger("legacy").warning("disk almost full")
    (event,) = captured.span("sparkrun.relay").events
    assert event.name == "sparkrun.log.warning" and event.attributes["message"] == "disk almost full"
    assert event.attributes["sparkrun.source"] == "legacy"


def test_launch_progress_events_become_phase_spans(captured, sctx):
    from sparkrun.core.operation import current_operation

    with operation_scope(sctx, name="run"):
        operation = current_operation()

        def phase(status, **extra):
            operation.deliver(
                {
                    "type": "progress",
                    "operation_id": operation.operation_id,
                    "timestamp": 1_700_000_000.0 + len(extra),
                    "message": f"build {status}",
                    "phase": 2,
                    "total_phases": 6,
                    "slug": "build",
                    "label": "Build image",
                    "status": status,
                    **extra,
                }
            )

        phase("running")
        phase("running", step={"index": 1, "total": 2, "label": "pull base"})
        phase("failed", reason="no space left", duration_seconds=3.0)
    span = captured.span("launch.build")
    assert span.status.status_code is StatusCode.ERROR and span.attributes["sparkrun.reason"] == "no space left"
    assert [e.name for e in span.events] == ["sparkrun.launch.step"]
    assert span.parent.span_id == root_span_id(operation.operation_id)


def test_many_counter_updates_are_coalesced_within_the_event_limit(captured, sctx):
    updates = 100_000
    with operation_scope(sctx, name="relay"):
        reporter = get_feedback("oci-relay")
        reporter.progress(
            "start", stage="transfer", status="running", current=0, total=updates, total_kind="exact", log_message=False
        )
        for i in range(1, updates):
            reporter.progress("receiving", current=i, total=updates, total_kind="exact", log_message=False)
            if i == 50_000:
                reporter.warning("slow mirror", log_message=False)
                reporter.progress("switching stage", stage="extract", log_message=False)
        reporter.progress(
            "last", current=updates, total=updates, total_kind="exact", status="succeeded", log_message=False
        )
    span = captured.span("oci-relay")
    messages = [e.attributes["message"] for e in span.events]
    assert len(span.events) <= 128 and span.dropped_events == 0
    assert messages[0] == "start" and messages[-1] == "last"
    assert "slow mirror" in messages and "switching stage" in messages
    assert span.attributes["sparkrun.reports"] == updates + 3  # start, 99,999 updates, warning, stage, last
    assert span.attributes["sparkrun.coalesced_events"] == updates + 3 - len(span.events)
    assert span.attributes["sparkrun.current"] == updates


def test_reports_that_say_something_new_are_kept_and_repeats_are_coalesced(captured, sctx):
    with operation_scope(sctx, name="relay"):
        news = get_feedback("news")
        for i in range(10):
            news.progress(f"layer {i} received")
        repeats = get_feedback("repeats")
        for i in range(10):  # within milliseconds: no sample is due
            repeats.progress("receiving", current=i, unit="files")
    assert len(captured.span("news").events) == 10
    span = captured.span("repeats")
    assert [(e.attributes["message"], e.attributes["sparkrun.current"]) for e in span.events] == [
        ("receiving", 0),
        ("receiving", 9),
    ]
    assert span.attributes["sparkrun.coalesced_events"] == 8 and span.attributes["sparkrun.current"] == 9


def test_metrics_by_low_cardinality_labels_only(captured, sctx):
    with operation_scope(sctx, name="relay") as operation:
        reporter = get_feedback("oci-relay").child(host="spark-1")
        reporter.progress("a", current=100, unit="bytes")
        reporter.progress("b", current=300, unit="bytes")
        reporter.warning("c")
        reporter.progress("d", status="succeeded")
    metrics = captured.metrics()
    events = {
        (p.attributes["sparkrun.source"], p.attributes["sparkrun.level"]): p.value
        for p in metrics["sparkrun.feedback.events"]
    }
    assert events == {("oci-relay", "progress"): 3, ("oci-relay", "warning"): 1}
    assert [p.value for p in metrics["sparkrun.transfer.bytes"]] == [300]
    assert sorted(p.attributes["sparkrun.status"] for p in metrics["sparkrun.activity.duration"]) == [
        "succeeded",  # the child
        "unfinished",  # its parent, which never reported and ended with the operation
    ]
    (duration,) = metrics["sparkrun.operation.duration"]
    assert dict(duration.attributes) == {"sparkrun.operation": "relay", "sparkrun.outcome": "succeeded"}
    assert [p.value for p in metrics["sparkrun.operations.active"]] == [0]
    ids = {operation.operation_id, reporter.activity_id, reporter.parent_id}
    for points in metrics.values():
        for point in points:
            assert not ids & {str(value) for value in point.attributes.values()}


def test_active_operations_gauge_counts_running_operations(captured, sctx):
    with operation_scope(sctx, name="relay"):
        (point,) = captured.metrics()["sparkrun.operations.active"]
        assert point.value == 1


def test_concurrent_operations_get_separate_traces(captured, tmp_path):
    from sparkrun.application import initialize

    ids = []

    def run(index: int) -> None:
        sctx = initialize(state_dir=tmp_path, events=lambda event: None)
        with operation_scope(sctx, name="parallel") as operation:
            reporter = get_feedback(f"worker-{index}")
            for _ in range(50):
                reporter.progress("tick")
        ids.append(operation.operation_id)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    by_trace = {}
    for span in captured.spans():
        by_trace.setdefault(_hex(span.context.trace_id, 32), []).append(span.name)
    assert sorted(by_trace) == sorted(ids)
    assert all(len(names) == 2 for names in by_trace.values())


def test_the_last_report_survives_when_sampling_room_is_used_up():
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import otel

    operation_id = "ab" * 16
    events = [
        {
            "type": "feedback",
            "operation_id": operation_id,
            "timestamp": 1_700_000_000.0 + 2 * i,  # far enough apart that every update wants a sample
            "source": "slow",
            "message": f"m{i}",
            "level": "progress",
            "activity_id": "act",
            "current": i,
            "total_kind": "unknown",
        }
        for i in range(200)
    ]
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=OperationIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.replay(events, tracer_provider=provider)
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "slow"]
    messages = [e.attributes["message"] for e in span.events]
    assert messages[0] == "m0" and messages[-1] == "m199" and len(messages) <= 128
    assert span.attributes["sparkrun.coalesced_events"] == 200 - len(messages)


def test_a_synthesized_parent_takes_its_identity_when_it_reports(captured, sctx):
    with operation_scope(sctx, name="relay"):
        parent = get_feedback("coldsnap").child(host="spark-9")
        parent.child(source="coldsnap.unit").progress("child first")
        parent.progress("parent at last", status="succeeded")
    span = captured.span("coldsnap")
    assert span.attributes["sparkrun.synthesized"] is False and span.attributes["host.name"] == "spark-9"
    assert span.attributes["sparkrun.parent_id"] == parent.parent_id


def test_benchmark_setup_and_unknown_event_types_become_root_span_events(captured, sctx):
    from sparkrun.core.legacy_events import benchmark_event, setup_event

    with operation_scope(sctx) as operation:
        benchmark_event("task_end", "bench_0123456789ab", "task 0 done", index=0, success=True, duration_s=1.5)
        setup_event("Installing drivers", source="setup.drivers", step="drivers", host="spark-1")
        operation.deliver(
            {"type": "future-kind", "operation_id": operation.operation_id, "timestamp": 1.0, "message": "hi"}
        )
    root = captured.span("sparkrun.pipeline")
    events = {event.name: dict(event.attributes) for event in root.events}
    assert events["sparkrun.benchmark.task_end"] == {
        "message": "task 0 done",
        "sparkrun.source": "",
        "sparkrun.kind": "task_end",
        "sparkrun.benchmark_id": "bench_0123456789ab",
        "sparkrun.index": 0,
        "sparkrun.success": True,
        "sparkrun.duration_s": 1.5,
    }
    assert events["sparkrun.setup"] == {
        "message": "Installing drivers",
        "sparkrun.source": "setup.drivers",
        "sparkrun.step": "drivers",
        "sparkrun.host": "spark-1",
    }
    assert events["sparkrun.future-kind"] == {"message": "hi", "sparkrun.source": ""}


def test_a_per_report_host_is_the_reports_host(captured, sctx):
    with operation_scope(sctx):
        reporter = get_feedback("relay").child(host="spark-1")
        first = reporter.progress("on the reporter's host")
        other = reporter.progress("on another host", host="spark-2")
    assert (first["host"], other["host"]) == ("spark-1", "spark-2")
    (span,) = [span for span in captured.spans() if span.attributes.get("sparkrun.activity_id") == reporter.activity_id]
    assert span.attributes["host.name"] == "spark-1"  # the activity's host; each report keeps its own


def test_a_child_that_opens_after_its_parent_ended_is_still_its_child(captured, sctx):
    with operation_scope(sctx, name="relay") as operation:
        parent = get_feedback("oci-relay")
        parent.progress("planned", status="succeeded")  # ends the parent's span
        parent.child(source="oci-relay.late").progress("a late sub-step", status="succeeded")
    late = captured.span("oci-relay.late")
    assert late.parent.span_id == activity_span_id(operation.operation_id, parent.activity_id)
    assert late.context.trace_id == captured.span("oci-relay").context.trace_id


def test_a_provider_that_does_not_take_chosen_ids_says_so_once(sctx, caplog):
    import logging

    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from otel.span_mapper import SpanMapper

    exporter = InMemorySpanExporter()
    provider = TracerProvider()  # the SDK's random ids: trace id = operation id cannot hold
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mapper = SpanMapper(provider)
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            with operation_scope(sctx, name="relay", observers=[mapper]) as operation:
                get_feedback("p").progress("still traced")
    warnings = [r.getMessage() for r in caplog.records if r.name == "otel.span_mapper"]
    assert len(warnings) == 1 and "trace ids are not operation ids" in warnings[0]
    roots = [span for span in exporter.get_finished_spans() if span.name == "sparkrun.relay"]
    assert len(roots) == 2 and all(_hex(r.context.trace_id, 32) != operation.operation_id for r in roots)
