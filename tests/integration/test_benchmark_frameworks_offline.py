"""llama-benchy and tool-eval-bench, the real PyPI packages, run offline against the example workload.

The frameworks live in their own environments, never sparkrun's: the ones sparkrun's environment
manager prepares (the ``benchmark_tools`` fixture; ``make test`` installs them ahead with
``sparkrun benchmark setup``). When they cannot be prepared, the tests fail with the reason.

Everything the frameworks reach is local: the example workload, a corpus served on loopback, a
tokenizer built by ``examples/benchmarks/make_tokenizer.py``. HOME, the caches and the working
directory are per test, and the Hugging Face libraries are told to stay offline. These are the
invocations ``examples/benchmarks/README.md`` documents.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.example_workload_harness import MODEL, ROOT, ServerProcess

pytestmark = pytest.mark.integration

BENCHMARKS = ROOT / "examples" / "benchmarks"


def _run(command: list[str], timeout: float) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip()[-2000:]
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}:\n{tail}")


@pytest.fixture
def start_workload() -> Iterator[Any]:
    """``start_workload(*options)`` starts the example workload; it is stopped after the test."""
    started: list[ServerProcess] = []

    def start(*options: str) -> ServerProcess:
        started.append(ServerProcess(*options))
        started[-1].wait_ready()
        return started[-1]

    try:
        yield start
    finally:
        for process in started:
            process.stop()


def offline_env(home: Path) -> dict[str, str]:
    """A clean environment: own HOME and caches, Hugging Face offline, no proxy for loopback."""
    home.mkdir(parents=True, exist_ok=True)
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "HF_HOME": str(home / ".cache" / "huggingface"),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
        "LANG": "C.UTF-8",
    }


def read_jsonl(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def test_llama_benchy_measures_prompt_and_generation_rates(
    benchmark_tools, tokenizer, corpus_url, start_workload, tmp_path
):
    workload = start_workload("--prompt-token-delay", "0.0002", "--token-delay", "0.002")  # finite rates
    result_file, progress_file = tmp_path / "result.json", tmp_path / "progress.jsonl"
    command = [
        str(benchmark_tools["llama-benchy"] / "llama-benchy"),
        *("--base-url", f"{workload.url}/v1", "--model", MODEL, "--tokenizer", str(tokenizer)),
        *("--book-url", corpus_url, "--pp", "64", "--tg", "16", "--depth", "0", "--concurrency", "1", "2"),
        *("--runs", "1", "--format", "json", "--save-result", str(result_file), "--emit-progress", str(progress_file)),
    ]
    run = subprocess.run(
        command, cwd=tmp_path, env=offline_env(tmp_path / "home"), capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Coherence test PASSED." in run.stdout
    assert "Delta: 0 tokens" in run.stdout  # the tokenizer counts as the server does

    report = json.loads(result_file.read_text())
    assert report["model"] == MODEL and report["latency_mode"] == "api" and report["max_concurrency"] == 2
    benchmarks = report["benchmarks"]
    assert [(b["concurrency"], b["context_size"], b["prompt_size"], b["response_size"]) for b in benchmarks] == [
        (1, 0, 64, 16),
        (2, 0, 64, 16),
    ]
    for benchmark in benchmarks:
        for metric in ("pp_throughput", "tg_throughput", "e2e_ttft"):
            assert benchmark[metric]["mean"] > 0, (metric, benchmark)

    events = read_jsonl(progress_file.read_text())
    assert events[0]["type"] == "header" and events[0]["schema"] == "llama-benchy-progress.v1"
    assert events[-1] == {**events[-1], "type": "bench_complete", "status": "ok"}
    starts = [event for event in events if event["type"] == "request_start"]
    ends = [event for event in events if event["type"] == "request_end"]
    assert len(starts) == len(ends) == 3  # one request at concurrency 1, two at 2; warmups are not reported
    assert {event["request_id"] for event in starts} == {event["request_id"] for event in ends}
    assert all(event["error"] == "" and event["total_tokens"] == 16 and event["prompt_tokens"] == 64 for event in ends)


def test_tool_eval_bench_scores_some_scenarios_pass_and_some_fail(benchmark_tools, start_workload, tmp_path):
    workload = start_workload()  # no delays: a tool request's prompt holds every tool's schema
    result_file = tmp_path / "tool-eval.json"
    command = [
        str(benchmark_tools["tool-eval-bench"] / "tool-eval-bench"),
        *("run", "--base-url", f"{workload.url}/v1", "--model", MODEL),
        *("--json", "--json-file", str(result_file), "--short", "--no-preflight"),
    ]
    # cwd matters: tool-eval-bench writes data/benchmarks.sqlite and runs/ under it. It also loads the
    # first .env found above it, or else above its own installed files (the repository's, for an
    # environment inside a checkout): an empty one in cwd keeps a developer's settings out of the run.
    (tmp_path / ".env").write_text("")
    run = subprocess.run(
        command, cwd=tmp_path, env=offline_env(tmp_path / "home"), capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout == ""  # --json-file: the envelope goes to the file, stdout stays clean

    report = json.loads(result_file.read_text())
    assert report["schema_version"] == "1" and report["status"] == "completed"
    results = report["scores"]["scenario_results"]
    statuses = Counter(result["status"] for result in results)
    assert statuses["pass"] >= 1 and statuses["fail"] >= 1, statuses
    assert len(results) == report["total_scenarios"] == 15
    assert report["scores"]["max_points"] == 2 * len(results)
    assert report["scores"]["total_points"] == sum(result["points"] for result in results)

    events = read_jsonl(run.stderr)  # every stderr line is a JSON object
    kinds = Counter(event["event"] for event in events)
    assert kinds["scenario_start"] == kinds["scenario_result"] == 15
    outcomes = {e["scenario_id"]: e["status"] for e in events if e["event"] == "scenario_result"}
    assert outcomes == {result["scenario_id"]: result["status"] for result in results}
    assert all(e["total"] == 15 for e in events if e["event"] in ("scenario_start", "scenario_result"))
    assert events[-1] == {
        "event": "benchmark_complete",
        "json_file": str(result_file),
        "final_score": report["final_score"],
    }
