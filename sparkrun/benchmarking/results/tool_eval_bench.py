"""The headline figures of a tool-eval-bench result file (``--json-file``, ``schema_version`` "1").

The file is the tool's result envelope: ``scores.scenario_results`` holds one
entry per scenario (``scenario_id``, ``status`` pass/partial/fail, ``points``),
``scores.total_points``, ``scores.max_points`` and ``scores.final_score`` the
totals; with several trials it is the last trial's scores plus
``trial_statistics`` (``trials``, ``final_score_mean``). A run that failed
writes an envelope with ``error`` and no scores: nothing was measured.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from sparkrun.benchmarking.results.result_files import FigureValue, ResultFields, read_result_json

__all__ = [
    "MAX_SCENARIO_RESULTS",
    "TOOL_EVAL_BENCH_RESULT_LIMIT",
    "ToolEvalBenchResult",
    "read_tool_eval_bench_result",
    "summarize_tool_eval_bench",
]

#: The largest result file read, in bytes: 100,000 scenarios with their logs fit; a runaway file does not.
TOOL_EVAL_BENCH_RESULT_LIMIT = 128 * 1024 * 1024
#: Scenario results accepted in one file (the contract's 100,000 scenarios, with room to spare).
MAX_SCENARIO_RESULTS = 1_000_000
_WHAT = "tool-eval-bench result"
_STATUSES = ("pass", "partial", "fail")


@dataclass(frozen=True)
class ToolEvalBenchResult:
    """What a tool-eval-bench run measured.

    ``measured`` is false when the file holds no scenario results (a failed
    run's envelope, or an empty selection): say so rather than show a score of 0.
    ``figures`` are flat scalars ready to be reported as metrics.
    """

    measured: bool
    scenarios: int
    distinct_scenarios: int
    passed: int
    partial: int
    failed: int
    points: int | None
    max_points: int | None
    score: float | int | None
    trials: int
    error: str | None
    figures: dict[str, FigureValue]


def read_tool_eval_bench_result(
    path: str | os.PathLike[str], *, limit: int = TOOL_EVAL_BENCH_RESULT_LIMIT
) -> ToolEvalBenchResult:
    """Read and check the result file at ``path``; raises ``ResultFileError`` naming file, field and value."""
    data = read_result_json(path, what=_WHAT, limit=limit)
    return summarize_tool_eval_bench(data, name=os.fspath(path))


def summarize_tool_eval_bench(data: Any, *, name: str = "result") -> ToolEvalBenchResult:
    """The figures of an already decoded result envelope (``name`` says where it came from in errors)."""
    check = ResultFields(_WHAT, name)
    top = check.mapping(data, "(top level)")
    if top.get("schema_version") != "1":
        raise check.invalid("schema_version", top.get("schema_version"), 'the string "1"')
    error = check.label(top["error"], "error") if top.get("error") is not None else None
    scores = check.mapping(top["scores"], "scores") if top.get("scores") is not None else {}
    tallies = dict.fromkeys(_STATUSES, 0)
    ids: set[str] = set()
    points_sum = 0
    entries = scores.get("scenario_results")
    results = [] if entries is None else check.array(entries, "scores.scenario_results", limit=MAX_SCENARIO_RESULTS)
    for index, entry in enumerate(results):
        field = f"scores.scenario_results[{index}]"
        item = check.mapping(entry, field)
        scenario_id = item.get("scenario_id")
        if type(scenario_id) is not str or not scenario_id:
            raise check.invalid(f"{field}.scenario_id", scenario_id, "a non-empty string")
        status = item.get("status")
        if status not in _STATUSES:
            raise check.invalid(f"{field}.status", status, "one of pass, partial, fail")
        ids.add(scenario_id)
        tallies[status] += 1
        points_sum += check.count(item.get("points"), f"{field}.points")
    points = _optional_count(check, scores, "total_points", default=points_sum if results else None)
    max_points = _optional_count(check, scores, "max_points", default=None)
    score_field = "scores.final_score" if scores.get("final_score") is not None else "final_score"
    score_value = scores.get("final_score") if score_field == "scores.final_score" else top.get("final_score")
    score = None if score_value is None else check.number(score_value, score_field, limit=100)
    trials, score_mean = 1, None
    statistics = top.get("trial_statistics")
    if statistics is not None:
        statistics = check.mapping(statistics, "trial_statistics")
        trials = max(1, check.count(statistics.get("trials"), "trial_statistics.trials"))
        mean = statistics.get("final_score_mean")
        score_mean = None if mean is None else check.number(mean, "trial_statistics.final_score_mean", limit=100)
    figures: dict[str, FigureValue] = {
        "scenarios": len(results),
        "scenarios_passed": tallies["pass"],
        "scenarios_partial": tallies["partial"],
        "scenarios_failed": tallies["fail"],
    }
    optional: dict[str, FigureValue | None] = {
        "points": points,
        "max_points": max_points,
        "score": score,
        "score_mean": score_mean,
        "trials": trials if statistics is not None else None,
        "rating": check.label(top["rating"], "rating") if type(top.get("rating")) is str else None,
        "error": error,
    }
    figures.update({key: value for key, value in optional.items() if value is not None})
    return ToolEvalBenchResult(
        measured=bool(results),
        scenarios=len(results),
        distinct_scenarios=len(ids),
        passed=tallies["pass"],
        partial=tallies["partial"],
        failed=tallies["fail"],
        points=points,
        max_points=max_points,
        score=score,
        trials=trials,
        error=error,
        figures=figures,
    )


def _optional_count(check: ResultFields, scores: dict[str, Any], key: str, *, default: int | None) -> int | None:
    value = scores.get(key)
    return default if value is None else check.count(value, f"scores.{key}")
