"""benchmark and setup events: validated where made, schema-valid, and mapped to root-span events."""

from __future__ import annotations

import json

import jsonschema
import pytest

from sparkrun.cli.live import LiveRenderer
from sparkrun.core.legacy_events import BENCHMARK_FIELDS, benchmark_event, setup_event
from sparkrun.core.operation import operation_scope
from sparkrun.schemas import load_schema
from tests.conftest import drain

EXAMPLES = {
    "schedule_started": {"total_tasks": 2, "title": "llama-benchy d=0"},
    "task_start": {"index": 0, "label": "d=0 c=1"},
    "task_end": {"index": 0, "success": True, "duration_s": 1.5},
    "results_update": {"results": [{"label": "d=0 c=1", "tg_tps": 41.2}]},
    "schedule_finished": {"total_tasks": 2},
    "run_complete": {"success": True, "resumed": False},
}


def _emit_all() -> None:
    for kind, fields in EXAMPLES.items():
        benchmark_event(kind, "bench_0123456789ab", f"{kind} happened", **fields)
    setup_event("Installing drivers", source="setup.drivers", step="drivers", status="running", host="spark-1")


def test_every_kind_is_delivered_and_matches_its_schema(sctx):
    assert set(EXAMPLES) == set(BENCHMARK_FIELDS)
    with operation_scope(sctx) as operation:
        _emit_all()
    events = drain(sctx.queue)
    assert [e["type"] for e in events] == ["benchmark"] * 6 + ["setup"]
    assert {e["operation_id"] for e in events} == {operation.operation_id}
    for event in events:
        jsonschema.Draft202012Validator(load_schema(event["type"])).validate(json.loads(json.dumps(event)))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: benchmark_event("task_progress", "b", "x", index=0), "kind is 'task_progress'; expected one of"),
        (lambda: benchmark_event("task_end", "b", "x", index=0), "a task_end event needs success, duration_s"),
        (lambda: benchmark_event("task_start", "b", "x", index=0, label=float("nan")), "label is nan; JSON numbers"),
        (lambda: benchmark_event("task_start", "", "x", index=0, label="l"), "benchmark_id is empty"),
        (lambda: setup_event("x", source="s", status="done"), "status is 'done'; expected one of running"),
        (lambda: setup_event("x", source="s", type="feedback"), "type is set by sparkrun; it cannot be an extra"),
    ],
)
def test_bad_legacy_events_are_value_errors(call, message):
    with pytest.raises(ValueError) as raised:
        call()
    assert str(raised.value).startswith(message)


def test_the_schema_refuses_a_kind_without_its_fields():
    validator = jsonschema.Draft202012Validator(load_schema("benchmark"))
    event = {
        "type": "benchmark",
        "operation_id": "0" * 31 + "1",
        "timestamp": 1.0,
        "message": "m",
        "kind": "task_end",
        "benchmark_id": "b",
        "index": 0,
    }
    assert not validator.is_valid(event)


def test_the_terminal_draws_them_as_lines(sctx):
    with operation_scope(sctx):
        _emit_all()
    lines = []

    class Stream:
        def write(self, text: str) -> None:
            lines.append(text)

        def flush(self) -> None:
            pass

        def isatty(self) -> bool:
            return False

    with LiveRenderer(Stream()) as render:  # type: ignore[arg-type]
        for event in drain(sctx.queue):
            render(event)
    assert lines[0] == "benchmark schedule_started: schedule_started happened\n"
    assert lines[-1] == "setup    setup.drivers: Installing drivers\n"
