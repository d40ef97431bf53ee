"""Heartbeats report silent work from a background thread, joined on exit."""

from __future__ import annotations

import threading
import time

import pytest

from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from tests.conftest import drain


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sparkrun-heartbeat-")]


def test_heartbeat_reports_until_the_block_exits_and_joins(sctx):
    with operation_scope(sctx, name="t"):
        reporter = get_feedback("beat")
        with reporter.heartbeat("Verifying image", interval=0.02):
            time.sleep(0.15)
            assert _heartbeat_threads()
        assert not _heartbeat_threads()
        count = len(drain(sctx.queue))
        time.sleep(0.08)
    assert drain(sctx.queue) == []  # nothing after the block exited
    assert count >= 3


def test_heartbeat_reports_label_and_elapsed_seconds(sctx):
    with operation_scope(sctx, name="t"):
        with get_feedback("beat").heartbeat("Verifying image", interval=0.02):
            time.sleep(0.1)
    events = drain(sctx.queue)
    assert {e["message"] for e in events} == {"Verifying image"}
    elapsed = [e["metrics"]["elapsed_seconds"] for e in events]
    assert elapsed[0] == 0.0 and elapsed == sorted(elapsed) and elapsed[-1] > 0
    assert threading.current_thread().name != "sparkrun-heartbeat-beat"


def test_heartbeat_label_may_be_callable(sctx):
    calls = []

    def label() -> str:
        calls.append(1)
        return f"Verifying ({len(calls)})"

    with operation_scope(sctx, name="t"):
        with get_feedback("beat").heartbeat(label, interval=0.02):
            time.sleep(0.1)
    messages = [e["message"] for e in drain(sctx.queue)]
    assert messages[0] == "Verifying (1)" and len(set(messages)) == len(messages) >= 3


def test_heartbeat_joins_even_when_the_block_raises(sctx):
    with operation_scope(sctx, name="t"), pytest.raises(RuntimeError):
        with get_feedback("beat").heartbeat("x", interval=0.01):
            raise RuntimeError("work failed")
    assert not _heartbeat_threads()


def test_a_failing_tick_is_logged_not_raised(sctx, caplog):
    labels = iter(["first"])

    with operation_scope(sctx, name="t"):
        with get_feedback("beat").heartbeat(lambda: next(labels), interval=0.02):
            time.sleep(0.06)
    assert any("heartbeat of beat could not report" in r.getMessage() for r in caplog.records)
