"""Operation scopes: ids, outcomes, observers, nesting, cancellation."""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint

import pytest

from sparkrun.core import operation as operation_module
from sparkrun.core.operation import (
    OperationObserver,
    add_observer,
    current_operation,
    operation_scope,
    remove_observer,
)
from sparkrun.errors import OperationCancelled
from sparkrun.feedback import get_feedback
from tests.conftest import drain


class Recorder(OperationObserver):
    def __init__(self):
        self.calls = []

    def operation_started(self, info):
        self.calls.append(("started", info.operation_id, info.name))

    def on_event(self, info, event):
        self.calls.append(("event", info.operation_id, event["message"]))

    def operation_finished(self, info, outcome, error):
        self.calls.append(("finished", info.operation_id, outcome, error))


def test_operation_id_is_32_lowercase_hex(sctx):
    ids = set()
    for _ in range(50):
        with operation_scope(sctx, name="t") as operation:
            ids.add(operation.operation_id)
    assert len(ids) == 50 and all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids)


def test_scope_sets_and_restores_the_current_operation(sctx):
    assert current_operation() is None and sctx.operation is None
    with operation_scope(sctx, name="t") as operation:
        assert current_operation() is operation and sctx.operation is operation
    assert current_operation() is None and sctx.operation is None


def test_observer_sees_start_every_event_and_finish(sctx):
    recorder = Recorder()
    with operation_scope(sctx, name="pipeline", observers=[recorder]) as operation:
        get_feedback("p").progress("one")
        get_feedback("p").warning("two")
    oid = operation.operation_id
    assert recorder.calls == [
        ("started", oid, "pipeline"),
        ("event", oid, "one"),
        ("event", oid, "two"),
        ("finished", oid, "succeeded", None),
    ]


def test_failed_outcome_carries_the_error(sctx):
    recorder = Recorder()
    with pytest.raises(KeyError), operation_scope(sctx, name="t", observers=[recorder]) as operation:
        raise KeyError("boom")
    assert operation.outcome == "failed" and isinstance(operation.error, KeyError)
    assert recorder.calls[-1][2] == "failed"


def test_cancellation(sctx):
    with pytest.raises(OperationCancelled), operation_scope(sctx, name="t") as operation:
        operation.cancel()
        assert operation.cancelled
        operation.raise_if_cancelled()
    assert operation.outcome == "cancelled"


def test_context_and_process_observers(sctx):
    context_recorder, process_recorder = Recorder(), Recorder()
    sctx.observers.append(context_recorder)
    add_observer(process_recorder)
    try:
        with operation_scope(sctx, name="t"):
            get_feedback("p").progress("x")
    finally:
        remove_observer(process_recorder)
    with operation_scope(sctx, name="after"):
        pass
    assert [c[0] for c in context_recorder.calls] == ["started", "event", "finished", "started", "finished"]
    assert [c[0] for c in process_recorder.calls] == ["started", "event", "finished"]


def test_primary_subscriber_is_served_before_observers(sctx):
    order = []
    sctx.events = lambda event: order.append("subscriber")

    class Observer(OperationObserver):
        def on_event(self, info, event):
            order.append("observer")

    with operation_scope(sctx, name="t", observers=[Observer()]):
        get_feedback("p").progress("x")
    assert order == ["subscriber", "observer"]


def test_nested_scope_of_the_same_context_joins(sctx):
    recorder = Recorder()
    sctx.observers.append(recorder)
    with operation_scope(sctx, name="outer") as outer:
        with operation_scope(sctx, name="inner") as inner:
            assert inner is outer
    assert [c[0] for c in recorder.calls] == ["started", "finished"]


def test_scope_of_another_context_is_a_new_operation(sctx, tmp_path):
    from sparkrun.application import initialize

    other = initialize(state_dir=tmp_path)
    with operation_scope(sctx, name="a") as first, operation_scope(other, name="b") as second:
        assert first is not second and current_operation() is second
        assert sctx.operation is first  # its own running operation, seen from elsewhere


def test_operation_name_is_validated(sctx):
    with pytest.raises(ValueError, match="operation name is empty"), operation_scope(sctx, name=""):
        pass


def test_entry_point_observers_are_loaded_once(monkeypatch, sctx):
    made = []

    class FromEntryPoint(Recorder):
        def __init__(self):
            super().__init__()
            made.append(self)

    operation_module._process_observers.reload_entry_points()
    monkeypatch.setitem(globals(), "FromEntryPoint", FromEntryPoint)
    entry = EntryPoint(name="rec", value=f"{__name__}:FromEntryPoint", group="sparkrun.observers")
    broken = EntryPoint(name="bad", value="no_such_module_xyz:Thing", group="sparkrun.observers")
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: [entry, broken])
    try:
        with operation_scope(sctx, name="t"):
            get_feedback("p").progress("x")
        with operation_scope(sctx, name="t2"):
            pass
        assert len(made) == 1
        assert [c[0] for c in made[0].calls] == ["started", "event", "finished", "started", "finished"]
    finally:
        for observer in made:
            remove_observer(observer)
    drain(sctx.queue)
