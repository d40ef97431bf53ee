"""Lines and result files in the exact shapes the two frameworks write them.

tool-eval-bench (``cli/run_io.py``) writes ``json.dumps(event)`` with the
default separators; llama-benchy (``progress.py``) writes compact JSON with
``schema``, ``type`` and ``ts`` first. The result files mirror
``format_result`` (tool-eval-bench) and ``save_report(format="json")``
(llama-benchy).
"""

from __future__ import annotations

import json
from typing import Any

SCHEMA = "llama-benchy-progress.v1"


# -- tool-eval-bench -------------------------------------------------------------------------


def teb_start(scenario: str, index: int, total: int, *, title: str = "Direct Specialist Match", category: str = "A"):
    event = {"event": "scenario_start", "scenario_id": scenario, "title": title, "category": category}
    return json.dumps({**event, "index": index, "total": total})


def teb_result(scenario: str, status: str, points: int, index: int, total: int, *, duration: float = 0.05) -> str:
    event = {"event": "scenario_result", "scenario_id": scenario, "status": status, "points": points}
    return json.dumps({**event, "index": index, "total": total, "duration_seconds": duration})


def teb_complete(final_score: int = 87, json_file: str = "/results/task-0.json") -> str:
    return json.dumps({"event": "benchmark_complete", "json_file": json_file, "final_score": final_score})


def teb_envelope(
    results: list[tuple[str, str, int]],
    *,
    max_points: int | None = None,
    final_score: int = 87,
    trials: int | None = None,
) -> dict[str, Any]:
    """A ``--json-file`` result envelope (schema_version "1") holding ``results`` (id, status, points)."""
    total = sum(points for _, _, points in results)
    scenario_results = [
        {
            "scenario_id": scenario,
            "status": status,
            "points": points,
            "summary": "Routed the request to get_weather.",
            "note": None,
            "tool_calls_made": [],
            "expected_behavior": "Use get_weather.",
            "duration_seconds": 0.07,
            "turn_count": 1,
            "raw_log": f"model=stub\nscenario={scenario}",
        }
        for scenario, status, points in results
    ]
    scores = {
        "final_score": final_score,
        "total_points": total,
        "max_points": 2 * len(results) if max_points is None else max_points,
        "rating": "★★★★ Good",
        "category_scores": [],
        "scenario_results": scenario_results,
    }
    envelope: dict[str, Any] = {
        "schema_version": "1",
        "tool_eval_bench_version": "3.0.0",
        "final_score": final_score,
        "rating": "★★★★ Good",
        "safety_warnings": [],
        "total_scenarios": len(results),
        "run_id": "2026-01-01T00-00-00Z_abcdef12",
        "status": "completed",
        "config": {},
        "scores": scores,
        "metadata": {"model": "stub", "trials": trials or 1},
    }
    if trials:
        envelope["trial_statistics"] = {"trials": trials, "final_score_mean": float(final_score)}
    return envelope


def teb_failed_envelope(message: str = "Connection refused") -> dict[str, Any]:
    """What tool-eval-bench writes to --json-file when the run failed."""
    return {
        "schema_version": "1",
        "tool_eval_bench_version": "3.0.0",
        "final_score": None,
        "rating": None,
        "safety_warnings": [],
        "deployability": None,
        "responsiveness": None,
        "total_scenarios": None,
        "weighted_score": None,
        "error": message,
    }


# -- llama-benchy ----------------------------------------------------------------------------


def lb(kind: str, ts: float, **fields: Any) -> str:
    return json.dumps({"schema": SCHEMA, "type": kind, "ts": ts, **fields}, separators=(",", ":"))


def lb_header(ts: float = 1000.0) -> str:
    return lb("header", ts, llama_benchy_version="0.4.0")


def lb_start(request_id: int, ts: float, *, pp: int = 512, tg: int = 32, depth: int = 0, concurrency: int = 2) -> str:
    return lb(
        "request_start",
        ts,
        request_id=request_id,
        model="stub",
        base_url="http://127.0.0.1:8000/v1",
        prompt_size=pp,
        response_size=tg,
        context_size=depth,
        concurrency=concurrency,
        run_index=0,
        target_label="",
    )


def lb_tokens(request_id: int, ts: float, count: int = 1, snippet: str = "word ") -> str:
    return lb("tokens", ts, request_id=request_id, count=count, snippet=snippet, estimated=True)


def lb_end(request_id: int, ts: float, *, tokens: int = 32, decode: float = 0.5, error: str = "") -> str:
    sizes = {"total_tokens": tokens, "prompt_tokens": 512, "decode_seconds": decode}
    return lb("request_end", ts, request_id=request_id, **sizes, error=error)


def lb_metric(mean: float) -> dict[str, Any]:
    return {"mean": mean, "std": 1.5, "values": [mean - 1.5, mean + 1.5]}


def lb_entry(
    *, pp: int = 512, tg: int = 32, depth: int = 0, concurrency: int = 2, context: bool = False, scale: float = 1.0
) -> dict[str, Any]:
    """One ``benchmarks`` entry as llama-benchy's ``BenchmarkRun.model_dump()`` writes it."""
    return {
        "concurrency": concurrency,
        "context_size": depth,
        "prompt_size": pp,
        "response_size": tg,
        "is_context_prefill_phase": context,
        "pp_throughput": lb_metric(1000.0 * scale),
        "pp_req_throughput": lb_metric(600.0 * scale),
        "tg_throughput": lb_metric(50.0 * scale),
        "tg_req_throughput": lb_metric(25.0 * scale),
        "peak_throughput": lb_metric(60.0 * scale),
        "peak_req_throughput": lb_metric(30.0 * scale),
        "ttfr": lb_metric(120.0),
        "est_ppt": lb_metric(110.0),
        "e2e_ttft": lb_metric(125.0),
        "throughput_over_time": None,
        "requests_throughput_over_time": None,
    }


def lb_result(entries: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "version": "0.4.0",
        "timestamp": "2026-01-01 00:00:00Z",
        "latency_mode": "api",
        "latency_ms": 0.9,
        "model": "stub",
        "prefix_caching_enabled": False,
        "max_concurrency": 2,
        "benchmarks": entries,
    }
