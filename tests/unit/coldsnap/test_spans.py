"""A controller's timing records as activities: identity rules, default parent, stages, the receipt's spans."""

from __future__ import annotations

import pytest

from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from sparkrun.plugins.coldsnap.spans import ControllerSpans
from sparkrun.plugins.coldsnap.timing import TimingStream, validate_timing
from tests.conftest import drain
from tests.unit.coldsnap.records import OPERATION_ID, ORIGIN_NS, clock, done, line, numbered, span

REQUEST = {"launch": {"units": [{"id": "unit-0", "host": "spark-1"}, {"id": "unit-1", "host": "spark-2"}]}}


def _run(sctx, events, *, on_stage=None):
    stream = TimingStream(OPERATION_ID)
    with operation_scope(sctx, name="coldsnap"):
        reporter = get_feedback("coldsnap.restore")
        spans = ControllerSpans(reporter, REQUEST, on_stage=on_stage)
        for value in numbered(*events):
            spans(stream.feed(line(value)))
    return reporter.activity_id, spans, [e for e in drain(sctx.queue) if e["source"] != "coldsnap.restore"]


CONTROLLER = span()
WORKER = clock("worker-1", unit="unit-1", worker="worker-1", origin_unix_ns=ORIGIN_NS + 5_000_000_000)
PULL = span("worker-1-1", name="capsule.pull", clock="worker-1", start_offset_seconds=0.25)
HARDWARE = span("controller-2", name="coldsnap.hardware", parent="controller-1", start_offset_seconds=0.75)
PINNED = span("controller-3", name="units.launch", attributes={"unit": "unit-0", "host": "gpu-9", "phase": "x"})


def test_identity_parents_and_times_follow_the_contract(sctx):
    stages: list[tuple[int, str]] = []
    importer, _, events = _run(
        sctx,
        [
            ("clock", {"clock": clock()}),
            ("clock", {"clock": WORKER}),
            ("span_start", {"span": CONTROLLER}),
            ("span_start", {"span": HARDWARE}),
            ("span_start", {"span": PULL}),
            ("span_complete", {"span": done(PULL, 2.0)}),
            ("span_complete", {"span": done(PINNED, 0.5)}),
            ("span_complete", {"span": done(HARDWARE, 0.1)}),
            ("span_complete", {"span": done(CONTROLLER, 3.0)}),
        ],
        on_stage=lambda index, name: stages.append((index, name)),
    )
    last = {e["source"]: e for e in events}
    pull = last["coldsnap.capsule.pull"]
    assert pull["activity_id"] == f"{importer}/worker-1-1"
    assert pull["parent_id"] == f"{importer}/controller-1"  # no parent: the current controller span
    assert pull["host"] == "spark-2" and pull["metrics"]["unit"] == "unit-1"  # unit from its clock, host from it
    assert pull["metrics"]["started_at"] == pytest.approx(ORIGIN_NS / 1e9 + 5.25, abs=1e-6)
    assert pull["metrics"]["duration_seconds"] == 2.0 and pull["metrics"]["clock"] == "worker-1"
    pinned = last["coldsnap.units.launch"]
    assert pinned["host"] == "gpu-9" and pinned["metrics"]["unit"] == "unit-0"  # attributes win
    assert pinned["metrics"]["phase"] == "x" and "host" not in pinned["metrics"]
    assert last["coldsnap.hardware"]["parent_id"] == f"{importer}/controller-1"
    assert last["coldsnap.controller"]["parent_id"] == importer  # a controller span hangs off the invocation
    assert stages == [(1, "coldsnap.hardware")]


def test_a_failed_span_carries_its_error(sctx):
    failed = done(CONTROLLER, 0.2, status="error", attributes={"error": "disk full"})
    _, _, events = _run(sctx, [("clock", {"clock": clock()}), ("span_complete", {"span": failed})])
    (event,) = events
    assert event["level"] == "error" and event["status"] == "failed" and "disk full" in event["message"]


def test_the_receipts_spans_fill_what_the_stream_missed(sctx):
    _, spans, _ = _run(sctx, [("clock", {"clock": clock()}), ("span_start", {"span": CONTROLLER})])
    clocks, receipt_spans = validate_timing(
        {"format": 1, "clocks": [clock(), WORKER], "spans": [done(CONTROLLER, 3.0), done(PULL, 1.0)]}
    )
    with operation_scope(sctx, name="coldsnap"):
        spans.add_clocks(clocks)
        assert spans.complete_missing(receipt_spans) == 2
    finished = {e["source"]: e for e in drain(sctx.queue)}
    assert finished["coldsnap.controller"]["status"] == "succeeded"
    assert finished["coldsnap.capsule.pull"]["metrics"]["duration_seconds"] == 1.0
