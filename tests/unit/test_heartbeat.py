"""Heartbeats report silent work from a background thread, joined on exit.

The tests wait for the beats they need (with a generous deadline) instead of sleeping a fixed time
and counting, so a loaded machine makes them slower, never red.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from queue import Empty, SimpleQueue
from typing import Any

import pytest

from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from tests.conftest import drain

#: Seconds to wait for something that takes milliseconds on an idle machine.
DEADLINE = 30.0


def _heartbeat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("sparkrun-heartbeat-")]


def _take(queue: SimpleQueue, count: int) -> list[dict]:
    """The next ``count`` events of ``queue``, waiting for each; fails if they do not arrive in time."""
    deadline = time.monotonic() + DEADLINE
    events = []
    for _ in range(count):
        try:
            events.append(queue.get(timeout=max(0.0, deadline - time.monotonic())))
        except Empty:
            pytest.fail(f"only {len(events)} of {count} heartbeat events arrived within {DEADLINE:g} s")
    return events


def _until(condition: Callable[[], Any], what: str) -> None:
    """Poll ``condition`` until it holds; fails after the deadline."""
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {DEADLINE:g} s waiting for {what}")
        time.sleep(0.005)


def test_heartbeat_reports_until_the_block_exits_and_joins(sctx):
    beaters: set[int] = set()

    def label() -> str:
        beaters.add(threading.get_ident())
        return "Verifying image"

    with operation_scope(sctx, name="t"):
        reporter = get_feedback("beat")
        with reporter.heartbeat(label, interval=0.02):
            beats = _take(sctx.queue, 3)  # the report on entry, then two from the background thread
            assert _heartbeat_threads()
        assert not _heartbeat_threads()
        beats += drain(sctx.queue)  # beats that arrived before the thread was joined
    beaters.discard(threading.get_ident())  # the report on entry comes from the caller's thread
    assert len(beaters) == 1, "the beats after the first come from one background thread"
    assert not [t for t in threading.enumerate() if t.ident in beaters], "the beating thread outlived the block"
    assert len(beats) >= 3 and {e["message"] for e in beats} == {"Verifying image"}
    assert drain(sctx.queue) == []  # nothing after the block exited


def test_heartbeat_reports_label_and_elapsed_seconds(sctx):
    with operation_scope(sctx, name="t"):
        with get_feedback("beat").heartbeat("Verifying image", interval=0.02):
            _until(lambda: sctx.queue.qsize() >= 3, "three heartbeat events")
    events = drain(sctx.queue)
    assert len(events) >= 3
    assert {e["message"] for e in events} == {"Verifying image"}
    assert {e["status"] for e in events} == {"running"}
    elapsed = [e["metrics"]["elapsed_seconds"] for e in events]
    assert elapsed[0] == 0.0 and elapsed == sorted(elapsed) and elapsed[-1] > 0
    assert threading.current_thread().name != "sparkrun-heartbeat-beat"


def test_heartbeat_label_may_be_callable_and_is_asked_each_beat(sctx):
    calls = []

    def label() -> str:
        calls.append(1)
        return f"Verifying ({len(calls)})"

    with operation_scope(sctx, name="t"):
        with get_feedback("beat").heartbeat(label, interval=0.02):
            messages = [e["message"] for e in _take(sctx.queue, 3)]
    later = drain(sctx.queue)  # whatever beat after the three, before the join
    assert messages == ["Verifying (1)", "Verifying (2)", "Verifying (3)"]
    assert len(calls) == 3 + len(later)  # one call per beat, and every beat is delivered


def test_heartbeat_joins_even_when_the_block_raises(sctx):
    with operation_scope(sctx, name="t"), pytest.raises(RuntimeError):
        with get_feedback("beat").heartbeat("x", interval=0.01):
            raise RuntimeError("work failed")
    assert not _heartbeat_threads()


def test_a_failing_tick_is_logged_not_raised(sctx, caplog):
    labels = iter(["first"])

    def failed_tick_logged() -> bool:
        return any("heartbeat of beat could not report" in r.getMessage() for r in caplog.records)

    with operation_scope(sctx, name="t"):
        with get_feedback("beat").heartbeat(lambda: next(labels), interval=0.02):
            _until(failed_tick_logged, "the failing tick to be logged")
            assert _heartbeat_threads()  # the failure did not end the heartbeat
    events = drain(sctx.queue)
    assert [e["message"] for e in events if e["type"] == "feedback"] == ["first"]  # no beat without a label
    assert not _heartbeat_threads()


def test_heartbeat_reports_under_its_stage_when_given(sctx):
    with operation_scope(sctx, name="t"):
        reporter = get_feedback("relay").child(host="spark-1")
        with reporter.heartbeat("Verifying on spark-1", interval=0.02, stage="verifying"):
            beats = _take(sctx.queue, 2)
        with reporter.heartbeat("Waiting", interval=0.02):
            plain = _take(sctx.queue, 1)
    assert [beat["stage"] for beat in beats] == ["verifying", "verifying"]
    assert all(beat["status"] == "running" and beat["host"] == "spark-1" for beat in beats)
    assert "stage" not in plain[0]
