"""Live rendering of an operation's events: plain lines off a terminal, rich on one."""

from __future__ import annotations

import io
import json
import logging
import re
from typing import Any

import pytest

from sparkrun.application import initialize
from sparkrun.cli.live import EventRecorder, LiveRenderer, counter_text, describe_progress, fan_out
from sparkrun.cli.render import describe_event
from sparkrun.core.launch_progress import LaunchPhaseTracker
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from tests.conftest import SPEC_TRANSFER

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
MIB = 1024 * 1024


def _visible(text: str) -> str:
    """Terminal output without its escape sequences."""
    return _ANSI.sub("", text)


@pytest.fixture
def events_into(tmp_path):
    """Run ``produce(sctx, operation)`` in a real operation whose subscriber is ``subscriber``."""

    def run(subscriber, produce) -> None:
        sctx = initialize(state_dir=tmp_path / "state", events=subscriber)
        with operation_scope(sctx, name="run") as operation:
            produce(sctx, operation)

    return run


def _mixed_events(sctx, operation) -> None:
    LaunchPhaseTracker(operation).skip("build", "nothing to build")
    get_feedback("my-plugin", sctx=sctx).progress("Image relayed", stage="relay", status="succeeded")
    logging.getLogger("legacy-plugin").warning("disk nearly full")


# -- plain lines (not a terminal) ---------------------------------------------------


def test_plain_renderer_prints_one_line_per_event(events_into):
    stream = io.StringIO()
    seen: list[dict[str, Any]] = []
    events_into(fan_out(seen.append, LiveRenderer(stream, force_terminal=False)), _mixed_events)

    assert [event["type"] for event in seen] == ["progress", "feedback", "log"]
    progress, feedback, log = seen
    assert stream.getvalue().splitlines() == [
        "[2/6] Build: skipped (nothing to build)",
        describe_event(feedback),
        describe_event(log),
    ]
    assert describe_progress(progress) == "[2/6] Build: skipped (nothing to build)"
    assert describe_event(log) == "warning  legacy-plugin: disk nearly full"
    assert "\x1b" not in stream.getvalue()


def test_renderer_is_plain_when_the_stream_is_not_a_terminal(events_into):
    stream = io.StringIO()  # isatty() is False
    events_into(LiveRenderer(stream), lambda sctx, operation: LaunchPhaseTracker(operation).start("prepare"))
    assert stream.getvalue() == "[1/6] Prepare: started\n"


def test_plain_renderer_prints_counters_as_lines_too(events_into):
    stream = io.StringIO()
    events_into(
        LiveRenderer(stream, force_terminal=False),
        lambda sctx, operation: get_feedback("relay", sctx=sctx).progress("Relaying image", **SPEC_TRANSFER),
    )
    (line,) = stream.getvalue().splitlines()
    assert line.endswith("Relaying image [1,048,576/<=4,194,304 bytes]")


# -- rich (a terminal) ---------------------------------------------------------------


def test_terminal_phase_line_shows_phase_number(events_into):
    stream = io.StringIO()
    with LiveRenderer(stream, force_terminal=True) as renderer:
        events_into(renderer, lambda sctx, operation: LaunchPhaseTracker(operation).skip("build", "nothing to build"))
    assert "[2/6] Build: skipped (nothing to build)" in _visible(stream.getvalue())


def test_terminal_highlights_warnings_and_errors(events_into):
    def produce(sctx, operation) -> None:
        feedback = get_feedback("my-plugin", sctx=sctx)
        feedback.warning("Layer cache is 91% full", log_message=False)
        feedback.error("Relay failed", status="failed", log_message=False)

    stream = io.StringIO()
    with LiveRenderer(stream, force_terminal=True) as renderer:
        events_into(renderer, produce)
    lines = _visible(stream.getvalue()).splitlines()
    assert "warning: my-plugin: Layer cache is 91% full" in lines
    assert "error: my-plugin: Relay failed" in lines
    assert "\x1b[" in stream.getvalue()  # styled, not plain


def _counter(total_kind: str, **fields: Any):
    def produce(sctx, operation) -> None:
        feedback = get_feedback("relay", sctx=sctx)
        total = {} if total_kind == "unknown" else {"total": 4 * MIB}
        feedback.progress(
            "Relaying image",
            stage="transfer",
            status="running",
            current=MIB,
            total_kind=total_kind,
            unit="bytes",
            log_message=False,
            **total,
            **fields,
        )

    return produce


def test_exact_total_draws_a_percentage(events_into):
    stream = io.StringIO()
    renderer = LiveRenderer(stream, force_terminal=True)
    events_into(renderer, _counter("exact"))
    renderer.close()
    output = _visible(stream.getvalue())
    assert "25%" in output
    assert "1.0 MiB of 4.0 MiB" in output


def test_upper_bound_total_draws_no_percentage(events_into):
    stream = io.StringIO()
    renderer = LiveRenderer(stream, force_terminal=True)
    events_into(renderer, _counter("upper_bound"))
    renderer.close()
    output = _visible(stream.getvalue())
    assert "1.0 MiB of up to 4.0 MiB" in output
    assert "%" not in output


def test_unknown_total_shows_only_the_amount(events_into):
    stream = io.StringIO()
    renderer = LiveRenderer(stream, force_terminal=True)
    events_into(renderer, _counter("unknown"))
    renderer.close()
    output = _visible(stream.getvalue())
    assert "relay: Relaying image" in output
    assert " of " not in output and "%" not in output
    frames = re.split(r"[\r\n]", output)
    assert any("relay: Relaying image" in frame and frame.rstrip().endswith(" 1.0 MiB") for frame in frames)


def test_finished_counter_is_printed_as_a_line(events_into):
    def produce(sctx, operation) -> None:
        _counter("exact")(sctx, operation)
        feedback = get_feedback("relay", sctx=sctx)
        feedback.progress(
            "Image relayed", stage="transfer", status="succeeded", current=4 * MIB, total=4 * MIB, total_kind="exact"
        )

    stream = io.StringIO()
    with LiveRenderer(stream, force_terminal=True) as renderer:
        events_into(renderer, produce)
    assert "transfer/succeeded" in _visible(stream.getvalue())
    assert "Image relayed" in _visible(stream.getvalue())


# -- counter_text --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"current": MIB, "total": 4 * MIB, "total_kind": "exact", "unit": "bytes"}, "1.0 MiB of 4.0 MiB"),
        ({"current": MIB, "total": 4 * MIB, "total_kind": "upper_bound", "unit": "bytes"}, "1.0 MiB of up to 4.0 MiB"),
        ({"current": MIB, "total_kind": "unknown", "unit": "bytes"}, "1.0 MiB"),
        ({"current": MIB, "unit": "bytes"}, "1.0 MiB"),
        ({"current": 512, "total": 2048, "total_kind": "exact", "unit": "bytes"}, "512 B of 2.0 KiB"),
        ({"current": 3, "total": 10, "total_kind": "exact", "unit": "files"}, "3 files of 10 files"),
        ({"current": 1500, "total": 2000, "total_kind": "upper_bound"}, "1,500 of up to 2,000"),
        ({"current": 2.5, "total_kind": "unknown", "unit": "s"}, "2.50 s"),
    ],
)
def test_counter_text(fields, expected):
    assert counter_text(fields) == expected


def test_counter_text_of_a_real_envelope(events_into):
    returned = []
    events_into(
        None,
        lambda sctx, operation: returned.append(
            get_feedback("relay", sctx=sctx).progress("Relaying image", log_message=False, **SPEC_TRANSFER)
        ),
    )
    assert counter_text(returned[0]) == "1.0 MiB of up to 4.0 MiB"


# -- recording and fan-out -------------------------------------------------------------


def test_event_recorder_writes_json_lines(tmp_path, events_into):
    path = tmp_path / "records" / "events.jsonl"
    recorder = EventRecorder(path)
    seen: list[dict[str, Any]] = []
    events_into(fan_out(seen.append, recorder), _mixed_events)
    recorder.close()

    assert [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()] == seen
    assert len({event["operation_id"] for event in seen}) == 1


def test_event_recorder_appends(tmp_path):
    path = tmp_path / "events.jsonl"
    for number in (1, 2):
        recorder = EventRecorder(path)
        recorder({"type": "log", "n": number})
        recorder.close()
    assert [json.loads(line)["n"] for line in path.read_text(encoding="utf-8").splitlines()] == [1, 2]


def test_fan_out_calls_subscribers_in_order_and_skips_none():
    calls: list[tuple[str, dict[str, Any]]] = []
    deliver = fan_out(lambda e: calls.append(("first", e)), None, lambda e: calls.append(("second", e)))
    event = {"type": "log", "message": "hello"}
    deliver(event)
    assert calls == [("first", event), ("second", event)]


def test_fan_out_of_nothing_delivers_to_nobody_and_returns_none():
    for deliver in (fan_out(), fan_out(None), fan_out(None, None)):
        assert callable(deliver)
        assert deliver({"type": "log"}) is None


def test_fan_out_hands_each_event_to_every_subscriber_once_in_order():
    calls: list[tuple[str, dict[str, Any]]] = []

    def subscriber(name: str):
        def receive(event: dict[str, Any]) -> str:
            calls.append((name, event))
            return f"{name} returned"  # what a subscriber returns is not passed on

        return receive

    deliver = fan_out(subscriber("first"), None, subscriber("second"), subscriber("third"))
    one, two = {"type": "log", "n": 1}, {"type": "log", "n": 2}
    assert deliver(one) is None
    assert deliver(two) is None
    assert calls == [("first", one), ("second", one), ("third", one), ("first", two), ("second", two), ("third", two)]
    assert all(event is one for _, event in calls[:3])  # the event itself, not a copy


def _lines_for(events_into, produce, **options) -> list[str]:
    out = io.StringIO()
    with LiveRenderer(out, **options) as render:
        events_into(render, produce)
    return out.getvalue().splitlines()


def _details(sctx, operation) -> None:
    feedback = get_feedback("plug")
    feedback.progress("normal progress")
    feedback.report("an info detail", level="info")
    feedback.report("a debug detail", level="debug")
    feedback.warning("a warning")
    feedback.error("an error")


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ({}, ["normal progress", "a warning", "an error"]),
        ({"verbose": 1}, ["normal progress", "an info detail", "a warning", "an error"]),
        ({"verbose": 2}, ["normal progress", "an info detail", "a debug detail", "a warning", "an error"]),
        ({"quiet": True}, ["a warning", "an error"]),
    ],
    ids=["default", "-v", "-vv", "-q"],
)
def test_info_and_debug_reports_only_with_verbose(events_into, options, shown):
    lines = _lines_for(events_into, _details, **options)
    assert len(lines) == len(shown) and all(line.endswith(text) for line, text in zip(lines, shown, strict=True))


def _failing_launch(sctx, operation) -> None:
    tracker = LaunchPhaseTracker(operation)
    feedback = get_feedback("sparkrun.launch")
    with pytest.raises(RuntimeError), tracker.phase("prepare"):
        raise RuntimeError("port 80 is already in use")
    feedback.error("port 80 is already in use", status="failed")
    feedback.child(host="spark-2").error("host spark-2 is unreachable", status="failed")


def _rendered_failure(**close) -> str:
    """What the renderer prints of a failing launch, closed with ``close`` (an error text, or interrupted)."""
    out = io.StringIO()
    render = LiveRenderer(out)
    with operation_scope(initialize(events=render), name="run") as operation:
        _failing_launch(None, operation)
    render.close(**close)
    return out.getvalue()


def test_the_operations_own_failure_is_said_once_by_the_error_line():
    assert _rendered_failure(error="port 80 is already in use").splitlines() == [
        "[1/6] Prepare: started",
        "error    sparkrun.launch@spark-2 failed              host spark-2 is unreachable",
        "[1/6] Prepare: failed",
    ]


def test_a_root_failure_that_adds_to_the_error_is_kept_and_ctrl_c_drops_them_all():
    kept = _rendered_failure(error="something else went wrong")
    assert "error    sparkrun.launch    failed              port 80 is already in use" in kept
    interrupted = _rendered_failure(interrupted=True)
    assert interrupted.splitlines() == [
        "[1/6] Prepare: started",
        "error    sparkrun.launch@spark-2 failed              host spark-2 is unreachable",
    ]


def test_bars_are_gone_before_the_last_line_on_a_terminal(events_into):
    out = io.StringIO()
    render = LiveRenderer(out, force_terminal=True)

    def counting(sctx, operation) -> None:
        reporter = get_feedback("plug")
        for done in range(5):
            reporter.progress("copying", current=done, total=5, total_kind="exact", unit="files")

    render.waiting("job 1234 queued (0 s): no events yet")
    events_into(render, counting)
    render.close()
    out.write("job 1234 succeeded\n")
    screen = _visible(out.getvalue())
    assert screen.splitlines()[-1] == "job 1234 succeeded"
