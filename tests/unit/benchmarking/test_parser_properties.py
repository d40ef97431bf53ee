"""Property tests: whatever a framework writes, every answer is a valid, showable report.

Lines are arbitrary text (surrogates and control characters included) and
event-shaped JSON whose fields hold arbitrary JSON values (huge integers,
NaN, deep containers). Every answer is reported through a real reporter, so
the envelope validator is the judge; the counter invariants of the contract
are checked across whole streams.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkrun.benchmarking.parsers import MAX_PARSER_METRICS, LlamaBenchyParser, ToolEvalBenchParser
from tests.unit.benchmarking.conftest import delivering
from tests.unit.benchmarking.streams import (
    lb_end,
    lb_entry,
    lb_result,
    lb_start,
    lb_tokens,
    teb_envelope,
    teb_result,
    teb_start,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANY_CHAR = st.characters(codec=None, exclude_categories=())
ANY_TEXT = st.text(ANY_CHAR, max_size=80)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.integers(min_value=-2, max_value=5),
    st.floats(allow_nan=True, allow_infinity=True),
    ANY_TEXT,
    st.sampled_from(["pass", "partial", "fail", "ok", "error", "warning", "TC-01", "TC-02", "TC-03"]),
)
JSON_VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ANY_TEXT, inner, max_size=3), max_leaves=8
)

IDS = st.sampled_from(["TC-01", "TC-02", "TC-03", "TC-04"])
SECONDS = st.floats(0, 5)
TEB_TEMPLATES: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "scenario_start": {
        "scenario_id": IDS,
        "title": ANY_TEXT,
        "category": ANY_TEXT,
        "index": st.integers(0, 4),
        "total": st.sampled_from([3, 4]),
    },
    "scenario_result": {
        "scenario_id": IDS,
        "status": st.sampled_from(["pass", "partial", "fail"]),
        "points": st.integers(0, 2),
        "index": st.integers(0, 4),
        "total": st.sampled_from([3, 4]),
        "duration_seconds": SECONDS,
    },
    "benchmark_complete": {"json_file": ANY_TEXT, "final_score": st.integers(0, 100)},
    "error": {"error": ANY_TEXT, "message": ANY_TEXT},
    "log": {"level": st.sampled_from(["info", "warning", "error"]), "logger": ANY_TEXT, "message": ANY_TEXT},
    "safety_gate_failed": {"safety_warnings": st.lists(ANY_TEXT, max_size=3)},
}
TS = st.floats(1000, 1010)
SIZES = st.integers(0, 4096)
LB_TEMPLATES: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "header": {"ts": TS, "schema": st.just("llama-benchy-progress.v1"), "llama_benchy_version": ANY_TEXT},
    "latency_measured": {"ts": TS, "latency_s": SECONDS, "mode": ANY_TEXT},
    "request_start": {
        "ts": TS,
        "request_id": st.integers(0, 9),
        "prompt_size": SIZES,
        "response_size": SIZES,
        "context_size": SIZES,
        "concurrency": st.integers(1, 4),
        "run_index": st.integers(0, 3),
    },
    "request_first_token": {"ts": TS, "request_id": st.integers(0, 9), "ttft_s": SECONDS},
    "tokens": {"ts": TS, "request_id": st.integers(0, 9), "count": st.integers(0, 5), "snippet": ANY_TEXT},
    "request_end": {
        "ts": TS,
        "request_id": st.integers(0, 9),
        "total_tokens": SIZES,
        "prompt_tokens": SIZES,
        "decode_seconds": SECONDS,
        "error": st.sampled_from(["", "", "HTTP 500"]) | ANY_TEXT,
    },
    "bench_complete": {"ts": TS, "status": st.sampled_from(["ok", "interrupted", "error"])},
}


def _event_lines(type_key: str, templates: dict[str, dict[str, st.SearchStrategy[Any]]]) -> st.SearchStrategy[str]:
    """Event lines near the real shape: each field plausible, dropped, or any JSON value; sometimes extra keys."""

    @st.composite
    def line(draw: Any) -> str:
        kind = draw(st.sampled_from(sorted(templates)) | st.sampled_from(sorted(templates)) | ANY_TEXT)
        event: dict[str, Any] = {type_key: kind}
        for key, plausible in templates.get(kind, {}).items():
            choice = draw(st.integers(0, 15))
            if choice:
                event[key] = draw(JSON_VALUES) if choice == 1 else draw(plausible)
        event.update(draw(st.dictionaries(ANY_TEXT, JSON_VALUES, max_size=2)))
        return json.dumps(event, ensure_ascii=draw(st.booleans()))

    return line()


def _lines(type_key: str, templates: dict[str, dict[str, st.SearchStrategy[Any]]]) -> st.SearchStrategy[str]:
    events = _event_lines(type_key, templates)
    mangled = events.map(lambda text: text[: len(text) // 2])  # cut mid-line
    noise = st.one_of(ANY_TEXT, mangled, st.text(st.sampled_from('{}[]",:0e-'), max_size=40))
    return st.one_of(events, events, events, noise)


TEB_LINES = _lines("event", TEB_TEMPLATES)
LB_LINES = _lines("type", LB_TEMPLATES)
RESULTS: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    JSON_VALUES,
    st.just(teb_envelope([("TC-01", "pass", 2), ("TC-02", "fail", 0)], trials=2)),
    st.just(lb_result([lb_entry()])),
    st.builds(lambda status, points: _one_result(status, points), SCALARS, SCALARS),
)


def _one_result(status: Any, points: Any) -> dict[str, Any]:
    envelope = teb_envelope([("TC-01", "pass", 2)])
    envelope["scores"]["scenario_results"][0].update(status=status, points=points)
    return envelope


def _check(events: list[dict[str, Any]]) -> None:
    for event in events:
        assert "could not be read" not in event["message"], event["message"]  # no parser bug was caught
        assert len(event["metrics"]) <= MAX_PARSER_METRICS + 3


@SETTINGS
@given(line=st.one_of(ANY_TEXT, TEB_LINES, LB_LINES))
def test_any_single_line_yields_a_valid_report_or_nothing(context, line):
    for parser in (ToolEvalBenchParser(), ToolEvalBenchParser(trials=3), LlamaBenchyParser()):
        with delivering(context, parser) as run:
            run.feed(line)
            _check(run.events)


@SETTINGS
@given(lines=st.lists(TEB_LINES, max_size=25), result=RESULTS, success=st.booleans())
def test_one_trial_streams_keep_the_counter_contract(context, lines, result, success):
    with delivering(context, ToolEvalBenchParser()) as run:
        run.start()
        run.feed_all(lines)
        run.finish(result, success=success)
    _check(run.events)
    seen_exact = dropped = False
    previous = 0
    for index, event in enumerate(run.events):
        assert event["unit"] == "scenarios"
        if event["total_kind"] == "exact":
            assert not dropped, "a total that became unknown never becomes exact again"
            assert event["current"] <= event["total"]
            seen_exact = True
        elif seen_exact:
            dropped = True
        if index < len(run.events) - 1:  # the final report may lower the count to the result's
            assert event["current"] >= previous, "distinct scenarios only grow"
            previous = event["current"]
    assert run.events[-1]["status"] == ("succeeded" if success else "failed")
    assert run.events[-1]["stage"] == "finalization"


@SETTINGS
@given(lines=st.lists(TEB_LINES, max_size=25), result=RESULTS, success=st.booleans())
def test_several_trial_streams_count_results_with_an_unknown_total(context, lines, result, success):
    with delivering(context, ToolEvalBenchParser(trials=2)) as run:
        run.start()
        run.feed_all(lines)
        run.finish(result, success=success)
    _check(run.events)
    currents = [event["current"] for event in run.events[:-1]]
    assert currents == sorted(currents)
    assert all(event["total_kind"] == "unknown" and event["unit"] == "scenario results" for event in run.events)


@SETTINGS
@given(lines=st.lists(LB_LINES, max_size=25), result=RESULTS, success=st.booleans())
def test_llama_benchy_streams_count_requests_with_an_unknown_total(context, lines, result, success):
    with delivering(context, LlamaBenchyParser(report_interval=0.5)) as run:
        run.start()
        run.feed_all(lines)
        run.finish(result, success=success)
    _check(run.events)
    currents = [event["current"] for event in run.events]
    assert currents == sorted(currents)
    assert all(event["total_kind"] == "unknown" and event["unit"] == "requests" for event in run.events)
    assert run.events[-1]["status"] == ("succeeded" if success else "failed")


# -- model-based: valid streams against a reference model of the contract -------------------

STEPS = st.lists(
    st.tuples(
        st.sampled_from(["start", "result"]),
        IDS,
        st.sampled_from(["pass", "partial", "fail"]),
        st.integers(0, 2),
        st.sampled_from([3, 3, 3, 4]),
    ),
    max_size=30,
)


@SETTINGS
@given(steps=STEPS, trials=st.sampled_from([1, 1, 2, 3]))
def test_valid_streams_match_a_model_of_the_contract(steps, trials):
    parser = ToolEvalBenchParser(trials=trials)
    announced, known, latest, received = None, True, {}, []
    for kind, scenario, status, points, total in steps:
        line = teb_start(scenario, 0, total) if kind == "start" else teb_result(scenario, status, points, 0, total)
        fields = parser.feed(line)
        if kind == "result":
            latest[scenario] = (status, points)
            received.append((status, points))
        announced = total if announced is None else announced
        known = known and total == announced and len(latest) <= announced
        outcomes = list(latest.values()) if trials == 1 else received
        metrics = fields["metrics"]
        assert [metrics[f"scenarios_{name}"] for name in ("passed", "partial", "failed")] == [
            sum(1 for outcome, _ in outcomes if outcome == name) for name in ("pass", "partial", "fail")
        ]
        assert metrics["points"] == sum(points for _, points in outcomes)
        if trials == 1:
            assert (fields["current"], fields.get("total"), fields["total_kind"]) == (
                len(latest),
                announced if known else None,
                "exact" if known else "unknown",
            )
        else:
            assert (fields["current"], fields.get("total"), fields["total_kind"]) == (len(received), None, "unknown")


LB_STEPS = st.lists(st.tuples(st.sampled_from(["start", "end", "tokens", "failed"]), st.integers(0, 3)), max_size=30)


@SETTINGS
@given(steps=LB_STEPS)
def test_valid_llama_benchy_streams_match_a_model(steps):
    parser = LlamaBenchyParser(report_interval=0)
    started = finished = failed = streamed = 0
    for ts, (kind, amount) in enumerate(steps):
        if kind == "start":
            started += 1
            line = lb_start(0, 1000.0 + ts)
        elif kind == "tokens":
            streamed += amount
            line = lb_tokens(0, 1000.0 + ts, count=amount)
        else:
            finished += 1
            failed += kind == "failed"
            line = lb_end(0, 1000.0 + ts, error="HTTP 503" if kind == "failed" else "")
        fields = parser.feed(line)
        assert fields is not None  # interval 0: every event is due
        metrics = fields["metrics"]
        assert (fields["current"], fields["total_kind"]) == (finished, "unknown")
        assert (metrics["requests_started"], metrics["requests_failed"]) == (started, failed)
        assert metrics["requests_in_flight"] == max(started - finished, 0)
        assert metrics["streamed_tokens"] == streamed
