"""Parsers keep bounded state: counters, and at most a bounded set of scenario ids.

Lines are made before tracing starts, so tracemalloc's peak is what the
parser allocates: its state plus one decoded line at a time. The bounds are several times what the parsers need and
well below what keeping every result would take, so a regression fails.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator

from sparkrun.benchmarking.parsers import LlamaBenchyParser, ToolEvalBenchParser
from sparkrun.benchmarking.parsers.tool_eval_bench import MAX_SCENARIO_ID_CHARS, MAX_SCENARIO_IDS
from tests.unit.benchmarking.streams import lb_end, lb_start, lb_tokens

MB = 1024 * 1024


def scenario_lines(count: int, *, trials: int = 1, id_chars: int = 0) -> Iterator[str]:
    statuses = ("pass", "partial", "fail")
    for _trial in range(trials):
        for index in range(count):
            scenario = f"tc{index:0{max(id_chars - 2, 6)}d}"
            yield json.dumps(
                {"event": "scenario_start", "scenario_id": scenario, "title": "A title", "category": "A"}
                | {"index": index, "total": count}
            )
            yield json.dumps(
                {"event": "scenario_result", "scenario_id": scenario, "status": statuses[index % 3]}
                | {"points": 2 - index % 3, "index": index, "total": count, "duration_seconds": 0.05}
            )


def peak_while_feeding(parser, lines) -> tuple[int, list]:
    """Peak traced bytes while ``parser`` reads ``lines``; the warnings it answered with."""
    lines = list(lines)
    warnings = []
    tracemalloc.start()
    try:
        for line in lines:
            fields = parser.feed(line)
            if fields is not None and fields.get("level") == "warning":
                warnings.append(fields)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, warnings


def test_100000_scenarios_of_one_trial_in_bounded_memory():
    parser = ToolEvalBenchParser()
    peak, warnings = peak_while_feeding(parser, scenario_lines(100_000))
    final = parser.finish(None, success=True)
    assert (final["current"], final["total"], final["total_kind"]) == (100_000, 100_000, "exact")
    metrics = final["metrics"]
    assert (metrics["scenarios_passed"], metrics["scenarios_partial"], metrics["scenarios_failed"]) == (
        33_334,
        33_333,
        33_333,
    )
    assert warnings == []
    assert peak < 16 * MB, f"{peak / MB:.1f} MB"  # the id set: about 11 MB


def test_several_trials_keep_no_state_per_result():
    parser = ToolEvalBenchParser(trials=2)
    peak, _ = peak_while_feeding(parser, scenario_lines(10_000, trials=2))
    assert parser.finish(None, success=True)["current"] == 20_000
    assert peak < MB // 2, f"{peak / MB:.2f} MB"  # a tuple per result would take over 1 MB


def test_the_scenario_id_budget_bounds_memory_at_its_worst():
    parser = ToolEvalBenchParser()
    count = MAX_SCENARIO_IDS + 10_000
    results = (line for line in scenario_lines(count, id_chars=MAX_SCENARIO_ID_CHARS) if "scenario_result" in line)
    peak, warnings = peak_while_feeding(parser, results)
    assert [warning["current"] for warning in warnings] == [MAX_SCENARIO_IDS + 1]
    assert warnings[0]["message"].endswith(
        f"; over {MAX_SCENARIO_IDS} distinct scenarios, repeats are no longer told apart"
    )
    assert parser.finish(None, success=True)["current"] == count
    assert peak < 40 * MB, f"{peak / MB:.1f} MB"  # 131,072 ids of 128 characters: about 27 MB


def test_llama_benchy_keeps_only_counters():
    def lines():
        for request in range(10_000):
            yield lb_start(request, 1000.0 + request)
            yield lb_tokens(request, 1000.5 + request, count=3, snippet="some generated text " * 20)
            yield lb_end(request, 1001.0 + request)

    parser = LlamaBenchyParser()
    peak, _ = peak_while_feeding(parser, lines())
    assert parser.finish(None, success=True)["current"] == 10_000
    assert peak < MB // 2, f"{peak / MB:.2f} MB"  # an entry per request would take over 1 MB
