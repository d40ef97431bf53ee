"""Replaying recorded events rebuilds the same trace and span ids."""

from __future__ import annotations

import json

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel
from otel.event_replay import read_events
from otel.ids import OperationIdGenerator
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from tests.conftest import drain


def _ids(spans) -> set[tuple]:
    return {(s.context.trace_id, s.context.span_id, s.parent.span_id if s.parent else None, s.name) for s in spans}


def _replayed(events) -> list:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=OperationIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.replay(events, tracer_provider=provider, name="relay")
    return list(exporter.get_finished_spans())


def _record(sctx) -> list[dict]:
    with operation_scope(sctx, name="relay"):
        parent = get_feedback("oci-relay")
        parent.progress("plan", stage="plan")
        for host in ("spark-1", "spark-2"):
            child = parent.child(host=host)
            child.progress("receiving", stage="transfer", current=1, total=2, total_kind="upper_bound", unit="bytes")
            child.progress("verified", stage="verify", status="succeeded")
        parent.progress("done", status="succeeded")
    return json.loads(json.dumps(drain(sctx.queue)))  # as recorded on disk


def test_replaying_twice_gives_identical_ids_equal_to_the_live_trace(captured, sctx):
    events = _record(sctx)
    live = _ids(captured.spans())
    first, second = _ids(_replayed(events)), _ids(_replayed(events))
    assert first == second == live
    assert len(first) == 4


def test_replay_keeps_event_times_and_statuses(sctx):
    events = _record(sctx)
    spans = _replayed(events)
    root = next(s for s in spans if s.parent is None)
    assert root.start_time == int(events[0]["timestamp"] * 1e9) and root.end_time == int(events[-1]["timestamp"] * 1e9)
    assert root.attributes["sparkrun.outcome"] == "unknown"
    assert {s.attributes.get("sparkrun.status") for s in spans if s.parent is not None} == {"succeeded"}


def test_replay_returns_operation_ids_of_each_operation(sctx):
    first, second = _record(sctx), _record(sctx)
    ids = otel.replay(first + second, tracer_provider=TracerProvider(id_generator=OperationIdGenerator()))
    assert ids == [first[0]["operation_id"], second[0]["operation_id"]]


def test_read_events_names_the_bad_line(tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"operation_id": "a", "timestamp": 1}\n\nnot json\n')
    with pytest.raises(ValueError, match=r"events.jsonl:3 is not JSON \(Expecting value, column 1\)"):
        list(read_events(path))


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("[1, 2]", "no operation_id"),
        ('{"timestamp": 1}', "no operation_id"),
        ('{"operation_id": "a"}', "timestamp=None"),
    ],
)
def test_read_events_rejects_non_events(tmp_path, line, problem):
    path = tmp_path / "events.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=rf"events.jsonl:1 is not a sparkrun event \({problem}\)"):
        list(read_events(path))


def test_bad_operation_id_in_replay_is_a_value_error():
    event = {"type": "feedback", "operation_id": "zz", "timestamp": 1.0, "message": "x"}
    with pytest.raises(ValueError, match="operation_id is 'zz'; it must be 32 hex characters"):
        otel.replay([event], tracer_provider=TracerProvider(id_generator=OperationIdGenerator()))
