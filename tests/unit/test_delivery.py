"""Delivery: serialized per operation, failures contained, no recursion."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from sparkrun.core.operation import current_operation, operation_scope, submit
from sparkrun.feedback import get_feedback
from tests.conftest import drain


def test_subscriber_exception_is_logged_and_never_raised(sctx, caplog):
    def broken(event):
        raise RuntimeError("subscriber bug")

    sctx.events = broken
    with operation_scope(sctx, name="t") as operation:
        event = get_feedback("plug").progress("still fine")
    assert event["message"] == "still fine" and operation.outcome == "succeeded"
    assert any("event subscriber of operation" in r.getMessage() for r in caplog.records)


def test_observer_exception_does_not_stop_other_consumers(sctx):
    class Broken:
        def operation_started(self, info):
            raise RuntimeError("start")

        def on_event(self, info, event):
            raise RuntimeError("event")

        def operation_finished(self, info, outcome, error):
            raise RuntimeError("finish")

    sctx.observers.append(Broken())
    with operation_scope(sctx, name="t") as operation:
        get_feedback("plug").progress("x")
    assert [e["message"] for e in drain(sctx.queue)] == ["x"]
    assert operation.outcome == "succeeded"


def test_feedback_from_inside_a_subscriber_is_not_delivered_again(sctx):
    received = []

    def chatty(event):
        received.append(event)
        get_feedback("echo").progress(f"echo of {event['message']}")  # must not recurse

    sctx.events = chatty
    with operation_scope(sctx, name="t"):
        get_feedback("plug").progress("original")
    assert [e["message"] for e in received] == ["original"]


def test_log_records_from_inside_a_subscriber_are_not_bridged(sctx):
    received = []

    def noisy(event):
        received.append(event)
        logging.getLogger("noisy").error("subscriber complains")

    sctx.events = noisy
    with operation_scope(sctx, name="t"):
        get_feedback("plug").progress("original")
    assert [e["message"] for e in received] == ["original"]


def test_eight_threads_of_1000_events_all_delivered_never_concurrently(sctx):
    in_flight = 0
    overlaps = 0
    received = []

    def subscriber(event):
        nonlocal in_flight, overlaps
        in_flight += 1
        if in_flight > 1:
            overlaps += 1
        time.sleep(0)  # invite a thread switch while "inside" the callback
        received.append(event)
        in_flight -= 1

    sctx.events = subscriber
    with operation_scope(sctx, name="t"):
        reporters = [get_feedback("plug").child(host=f"h{i}") for i in range(8)]

        def produce(reporter):
            for n in range(1000):
                reporter.progress("tick", current=n, log_message=False)

        threads = [threading.Thread(target=produce, args=(r,)) for r in reporters]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert overlaps == 0
    assert len(received) == 8000
    for reporter in reporters:
        mine = [e["current"] for e in received if e["activity_id"] == reporter.activity_id]
        assert mine == list(range(1000))  # per-producer order preserved


def test_submit_carries_the_operation_into_executor_threads(sctx):
    with operation_scope(sctx, name="t") as operation, ThreadPoolExecutor(2) as pool:
        seen = submit(pool, current_operation).result()
        plain = pool.submit(current_operation).result()
    assert seen is operation and plain is None
