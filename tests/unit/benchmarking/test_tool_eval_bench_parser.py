"""tool-eval-bench: the contract's counters, outcomes and final reconciliation, report by report."""

from __future__ import annotations

import json

import pytest

from sparkrun.benchmarking.parsers import ToolEvalBenchParser
from sparkrun.benchmarking.results import summarize_tool_eval_bench
from tests.unit.benchmarking.conftest import counters, delivering
from tests.unit.benchmarking.streams import teb_complete, teb_envelope, teb_failed_envelope, teb_result, teb_start

PREP = ("preparation", 0, None, "unknown", "scenarios", "running")

THREE = [("TC-01", "pass", 2), ("TC-02", "partial", 1), ("TC-03", "fail", 0)]


def one_trial_stream(results=THREE, total=3):
    lines = []
    for index, (scenario, status, points) in enumerate(results):
        lines += [teb_start(scenario, index, total), teb_result(scenario, status, points, index, total)]
    return [*lines, teb_complete(final_score=50)]


def test_one_trial_counts_distinct_scenarios_of_the_announced_exact_total(context):
    with delivering(context, ToolEvalBenchParser()) as run:
        first = run.start()
        answers = run.feed_all(one_trial_stream())
        last = run.finish(teb_envelope(THREE, final_score=50), success=True)
    assert first["source"] == "benchmark.tool-eval-bench"
    assert counters(first) == PREP
    assert [counters(event) for event in answers] == [
        ("scenarios", 0, 3, "exact", "scenarios", "running"),
        ("scenarios", 1, 3, "exact", "scenarios", "running"),
        ("scenarios", 1, 3, "exact", "scenarios", "running"),
        ("scenarios", 2, 3, "exact", "scenarios", "running"),
        ("scenarios", 2, 3, "exact", "scenarios", "running"),
        ("scenarios", 3, 3, "exact", "scenarios", "running"),
        ("finalization", 3, 3, "exact", "scenarios", "running"),
    ]
    assert [event["level"] for event in answers] == ["info", "progress"] * 3 + ["progress"]
    assert counters(last) == ("finalization", 3, 3, "exact", "scenarios", "succeeded")
    assert last["level"] == "progress"
    assert last["message"] == "tool-eval-bench finished: score 50, 1 pass, 1 partial, 1 fail, 3 of 6 points"


def test_outcomes_are_reported_live(context):
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all(one_trial_stream())
    results = answers[1:6:2]
    assert [event["message"] for event in results] == [
        "TC-01: pass, 2 points (1 of 3 scenarios)",
        "TC-02: partial, 1 point (2 of 3 scenarios)",
        "TC-03: fail, 0 points (3 of 3 scenarios)",
    ]
    tallies = [
        tuple(event["metrics"][key] for key in ("scenarios_passed", "scenarios_partial", "scenarios_failed", "points"))
        for event in results
    ]
    assert tallies == [(1, 0, 0, 2), (1, 1, 0, 3), (1, 1, 1, 3)]
    assert results[0]["metrics"]["last_status"] == "pass" and results[0]["metrics"]["last_points"] == 2
    assert results[0]["metrics"]["last_duration_seconds"] == 0.05
    assert answers[0]["message"] == "Scenario TC-01 (A) started: Direct Specialist Match"
    assert answers[-1]["message"] == (
        "tool-eval-bench completed its scenarios (3 of 3 scenarios); "
        "final score 50 (advisory until the result is accepted)"
    )
    assert answers[-1]["metrics"]["advisory_final_score"] == 50


def test_disagreeing_totals_make_the_total_unknown_for_the_rest_of_the_attempt(context):
    lines = [
        teb_start("TC-01", 0, 3),
        teb_result("TC-01", "pass", 2, 0, 3),
        teb_start("TC-02", 1, 4),  # disagrees
        teb_result("TC-02", "pass", 2, 1, 3),  # agrees with the first again: stays unknown
        teb_start("TC-03", 2, 3),
        teb_result("TC-03", "pass", 2, 2, 3),
    ]
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all(lines)
        all_pass = [("TC-01", "pass", 2), ("TC-02", "pass", 2), ("TC-03", "pass", 2)]
        last = run.finish(teb_envelope(all_pass), success=True)
    assert [counters(event)[1:4] for event in answers] == [
        (0, 3, "exact"),
        (1, 3, "exact"),
        (1, None, "unknown"),
        (2, None, "unknown"),
        (2, None, "unknown"),
        (3, None, "unknown"),
    ]
    assert answers[2]["level"] == "warning"
    assert answers[2]["message"] == (
        "Scenario TC-02 (A) started: Direct Specialist Match; "
        "the tool announced 4 scenarios after 3, so the total is now unknown"
    )
    assert counters(last) == ("finalization", 3, None, "unknown", "scenarios", "succeeded")


def test_more_distinct_results_than_announced_make_the_total_unknown(context):
    lines = [teb_result(f"TC-0{n}", "pass", 2, n, 2) for n in range(3)]
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all(lines)
    assert [counters(event)[1:4] for event in answers] == [(1, 2, "exact"), (2, 2, "exact"), (3, None, "unknown")]
    assert answers[2]["message"].endswith("; more scenarios reported than the 2 announced, so the total is now unknown")


def test_a_repeated_scenario_counts_once_with_its_latest_outcome(context):
    lines = [teb_result("TC-01", "fail", 0, 0, 2), teb_result("TC-01", "pass", 2, 0, 2)]
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all(lines)
    assert [event["current"] for event in answers] == [1, 1]
    metrics = answers[-1]["metrics"]
    assert (metrics["scenarios_passed"], metrics["scenarios_failed"], metrics["points"]) == (1, 0, 2)
    assert metrics["scenario_results"] == 2


def test_parallel_runs_count_by_scenario_id_not_by_index(context):
    # With --parallel, scenario_result's index is a completion counter: scenario ids decide.
    lines = [
        teb_start("TC-01", 0, 3),
        teb_start("TC-02", 1, 3),
        teb_start("TC-03", 2, 3),
        teb_result("TC-02", "pass", 2, 0, 3),
        teb_result("TC-03", "pass", 2, 1, 3),
        teb_result("TC-01", "pass", 2, 2, 3),
    ]
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all(lines)
    assert [event["current"] for event in answers] == [0, 0, 0, 1, 2, 3]
    assert answers[-1]["total"] == 3


def test_several_trials_count_results_received_with_an_unknown_total(context):
    pairs = [("TC-01", "pass", 2), ("TC-02", "fail", 0)]
    lines = []
    for _trial in range(2):
        for index, (scenario, status, points) in enumerate(pairs):
            lines += [teb_start(scenario, index, 2), teb_result(scenario, status, points, index, 2)]
    with delivering(context, ToolEvalBenchParser(trials=2)) as run:
        first = run.start()
        answers = run.feed_all([*lines, teb_complete()])
        last = run.finish(teb_envelope(pairs, trials=2), success=True)
    unit = "scenario results"
    assert counters(first) == ("preparation", 0, None, "unknown", unit, "running")
    assert [counters(event) for event in answers] == [
        ("scenarios", 0, None, "unknown", unit, "running"),
        ("scenarios", 1, None, "unknown", unit, "running"),
        ("scenarios", 1, None, "unknown", unit, "running"),
        ("scenarios", 2, None, "unknown", unit, "running"),
        ("scenarios", 2, None, "unknown", unit, "running"),
        ("scenarios", 3, None, "unknown", unit, "running"),
        ("scenarios", 3, None, "unknown", unit, "running"),
        ("scenarios", 4, None, "unknown", unit, "running"),
        ("finalization", 4, None, "unknown", unit, "running"),
    ]
    assert answers[7]["metrics"]["scenarios_passed"] == 2  # every trial's results count
    assert counters(last) == ("finalization", 4, None, "unknown", unit, "succeeded")
    assert last["metrics"]["trials"] == 2 and last["metrics"]["score_mean"] == 87.0


def test_the_accepted_result_file_overrides_live_counts(context):
    # One result line was lost (the tool crashed mid-write, say): the file has all three.
    lines = [teb_start("TC-01", 0, 3), teb_result("TC-01", "fail", 0, 0, 3), teb_result("TC-02", "fail", 0, 1, 3)]
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all(lines)
        last = run.finish(teb_envelope(THREE, final_score=50), success=True)
    assert answers[-1]["current"] == 2 and answers[-1]["metrics"]["scenarios_failed"] == 2
    assert counters(last) == ("finalization", 3, 3, "exact", "scenarios", "succeeded")
    metrics = last["metrics"]
    assert (metrics["scenarios_passed"], metrics["scenarios_partial"], metrics["scenarios_failed"]) == (1, 1, 1)
    assert (metrics["points"], metrics["max_points"], metrics["score"]) == (3, 6, 50)


def test_a_result_file_with_more_scenarios_than_announced_leaves_the_total_unknown(context):
    with delivering(context, ToolEvalBenchParser()) as run:
        run.feed_all([teb_start("TC-01", 0, 2), teb_result("TC-01", "pass", 2, 0, 2)])
        last = run.finish(teb_envelope(THREE), success=True)
    assert counters(last) == ("finalization", 3, None, "unknown", "scenarios", "succeeded")


def test_a_summary_object_is_accepted_as_the_result(context):
    summary = summarize_tool_eval_bench(teb_envelope(THREE, final_score=50))
    with delivering(context, ToolEvalBenchParser()) as run:
        run.feed_all(one_trial_stream())
        last = run.finish(summary, success=True)
    assert counters(last) == ("finalization", 3, 3, "exact", "scenarios", "succeeded")


def test_failure_keeps_the_live_counts_and_says_so(context):
    error_line = json.dumps({"event": "error", "error": "run_failed", "message": "Connection refused"})
    lines = [teb_start("TC-01", 0, 3), teb_result("TC-01", "pass", 2, 0, 3), teb_start("TC-02", 1, 3), error_line]
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all(lines)
        last = run.finish(None, success=False)
    assert answers[-1]["level"] == "warning"
    assert answers[-1]["message"] == "tool-eval-bench reported an error (run_failed): Connection refused"
    assert counters(last) == ("finalization", 1, 3, "exact", "scenarios", "failed")
    assert last["level"] == "error"
    assert last["message"] == "tool-eval-bench failed after 1 of 3 scenarios"


def test_failure_with_the_failed_envelope_names_the_tools_error(context):
    with delivering(context, ToolEvalBenchParser()) as run:
        run.start()
        last = run.finish(teb_failed_envelope("model not found"), success=False)
    assert counters(last) == ("finalization", 0, None, "unknown", "scenarios", "failed")
    assert last["message"] == "tool-eval-bench failed after 0 scenarios; the tool reported: model not found"


def test_success_without_scenario_results_says_nothing_was_measured(context):
    with delivering(context, ToolEvalBenchParser()) as run:
        last = run.finish(teb_envelope([]), success=True)
    assert last["level"] == "warning" and last["status"] == "succeeded"
    assert last["message"] == "tool-eval-bench finished but measured nothing (0 scenarios)"


def test_an_unusable_result_is_a_warning_naming_the_field(context):
    envelope = teb_envelope(THREE)
    envelope["scores"]["scenario_results"][1]["status"] = "PASS"
    with delivering(context, ToolEvalBenchParser()) as run:
        run.feed_all(one_trial_stream())
        last = run.finish(envelope, success=True)
    assert last["level"] == "warning" and last["status"] == "succeeded"
    assert counters(last)[1:4] == (3, 3, "exact")  # live counts stand
    assert last["message"] == (
        "tool-eval-bench finished (3 of 3 scenarios), but its result is unusable: "
        "tool-eval-bench result has an invalid field (path=result, field=scores.scenario_results[1].status, "
        "value='PASS'; expected one of pass, partial, fail)"
    )


def test_success_without_a_result_reports_the_live_counts(context):
    with delivering(context, ToolEvalBenchParser()) as run:
        run.feed_all(one_trial_stream())
        last = run.finish(None, success=True)
    assert counters(last) == ("finalization", 3, 3, "exact", "scenarios", "succeeded")
    assert last["level"] == "progress"
    assert last["message"] == "tool-eval-bench finished (3 of 3 scenarios; no result to reconcile with)"


@pytest.mark.parametrize("result", [[], "done", 42, {"schema_version": 1}])
def test_a_result_of_the_wrong_shape_never_raises(context, result):
    with delivering(context, ToolEvalBenchParser()) as run:
        last = run.finish(result, success=True)
    assert last["level"] == "warning" and "but its result is unusable: tool-eval-bench result" in last["message"]


@pytest.mark.parametrize(
    "event",
    [
        {"event": "backend_detected", "backend": "vllm"},
        {"event": "decision_audit_start", "scenario_id": "TC-01", "model": "judge", "check_id": "c1"},
        {"event": "log", "level": "info", "logger": "x", "message": "hello"},
        {"event": "something_new", "detail": 1},
    ],
)
def test_other_events_are_skipped(event):
    assert ToolEvalBenchParser().feed(json.dumps(event)) is None


def test_ordinary_text_lines_are_skipped():
    parser = ToolEvalBenchParser()
    for line in ["", "\n", "Traceback (most recent call last):", "  File x", "42", "null", '"text"']:
        assert parser.feed(line) is None


def test_tool_warnings_are_forwarded(context):
    log = json.dumps({"event": "log", "level": "warning", "logger": "tool_eval_bench", "message": "rate limited"})
    gate = json.dumps({"event": "safety_gate_failed", "safety_warnings": ["a", "b"]})
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all([log, gate])
    assert [(event["level"], event["message"]) for event in answers] == [
        ("warning", "tool-eval-bench logged a warning: rate limited"),
        ("warning", "tool-eval-bench's safety gate failed (2 safety warnings)"),
    ]


@pytest.mark.parametrize("trials", [0, -1, 1.0, True, "2"])
def test_trials_must_be_a_positive_integer(trials):
    with pytest.raises(ValueError, match=r"^trials is .*; it must be an integer >= 1$"):
        ToolEvalBenchParser(trials=trials)
