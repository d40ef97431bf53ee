"""``sparkrun benchmark run`` with the real frameworks against the example workload, offline.

llama-benchy sweeps depth and concurrency from a schedule; tool-eval-bench runs its short suite, where
some scenarios pass and some fail. Both through the CLI (live progress, a results table, a trace in the
local store and in Phoenix) and as a daemon job (the journal holds one copy of each report).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from otel.local_store import TraceStore
from tests.integration.benchmark_harness import ROOT, Bench, offline_environment
from tests.integration.daemon_harness import DaemonProcess, journal_rows

pytestmark = pytest.mark.integration

BENCH_RECIPE = ROOT / "examples" / "recipes" / "example-bench.yaml"


def _llama_args(tokenizer, corpus_url) -> list[str]:
    return [
        *("--arg", f"tokenizer={tokenizer}", "--arg", f"book-url={corpus_url}"),
        *("--arg", "pp=64", "--arg", "tg=16", "--arg", "runs=1"),
    ]


def test_llama_benchy_sweeps_its_schedule_with_live_progress_a_table_and_a_trace(
    benchmark_tools, tokenizer, corpus_url, tmp_path, phoenix
):
    bench = Bench(tmp_path)
    schedule = tmp_path / "sweep.yaml"
    schedule.write_text("title: Depth sweep\ndepth: [0, 64]\nconcurrency: [1, 2]\n")
    env = {
        **bench.env,
        "OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.http_endpoint,
        "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    }
    argv = bench.argv(
        "run",
        str(BENCH_RECIPE),
        "--framework",
        "llama-benchy",
        "--schedule",
        str(schedule),
        *_llama_args(tokenizer, corpus_url),
    )
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    table = [line.split() for line in done.stdout.splitlines() if line.startswith("d=")]
    assert [row[:3] for row in table] == [
        ["d=0", "c=1", "succeeded"],
        ["d=0", "c=2", "succeeded"],
        ["d=64", "c=1", "succeeded"],
        ["d=64", "c=2", "succeeded"],
    ]
    assert "pp_tokens_per_second" in done.stdout and "tg_tokens_per_second" in done.stdout
    live = [line for line in done.stdout.splitlines() if line.startswith("progress benchmark.llama-benchy")]
    assert any("requests" in line for line in live)  # the parser's live request counts
    operation_id = done.stdout.strip().splitlines()[-1].rsplit(" ", 1)[1]
    # the example workload exports its request spans to the same trace: wait for sparkrun's own
    spans = phoenix.spans(operation_id, min_count=4, named="benchmark.llama-benchy", timeout=30)
    by_id = {span["context"]["span_id"]: span for span in spans}
    attempts = [span for span in spans if span["name"] == "benchmark.llama-benchy"]
    assert len(attempts) == 4
    for attempt in attempts:
        task = by_id[attempt["parent_id"]]
        assert task["name"] == "benchmark.task" and by_id[task["parent_id"]]["name"] == "benchmark.run"
        assert attempt["attributes"]["sparkrun.metric.result.tg_tokens_per_second"] > 0
        assert attempt["status_code"] == "OK"


def test_tool_eval_bench_scores_through_sparkrun_and_shows_both_outcomes(benchmark_tools, tmp_path):
    bench = Bench(tmp_path)
    events_file = tmp_path / "events.jsonl"
    done = bench.cli(
        "run",
        str(ROOT / "examples/recipes/example-chat.yaml"),
        "--framework",
        "tool-eval-bench",
        "--arg",
        "short",
        "--arg",
        "no-preflight",
        "--events-jsonl",
        str(events_file),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    (row,) = [line.split() for line in done.stdout.splitlines() if line.startswith("scenarios ")]
    assert row[1] == "succeeded"
    results = json.loads(bench.cli("results", "--json").stdout)
    figures = results["tasks"][0]["figures"]
    assert figures["scenarios_passed"] >= 1 and figures["scenarios_failed"] >= 1
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    attempt = [e for e in events if e.get("source") == "benchmark.tool-eval-bench"]
    stages = list(dict.fromkeys(e["stage"] for e in attempt if "stage" in e))
    assert stages == ["preparation", "scenarios", "finalization"]
    final = attempt[-1]
    assert (
        final["status"] == "succeeded" and final["current"] == final["total"] == 15 and final["total_kind"] == "exact"
    )
    assert all(e.get("total_kind") != "upper_bound" for e in attempt)
    trace = bench.cli("status")  # and the trace shows one span per attempt
    assert "completed" in trace.stdout
    operation_id = next(e for e in events if e.get("type") == "benchmark")["operation_id"]
    spans = TraceStore.in_state_dir(bench.state_dir).spans(operation_id)
    assert [s.name for s in spans].count("benchmark.tool-eval-bench") == 1


def test_a_daemon_benchmark_job_journals_each_report_once(benchmark_tools, tmp_path):
    with DaemonProcess(tmp_path / "daemon", env=offline_environment(tmp_path / "home")) as daemon:
        response = daemon.client.post(
            "/v1/jobs",
            json={
                "operation": "benchmark",
                "arguments": {
                    "target": str(ROOT / "examples/recipes/example-chat.yaml"),
                    "framework": "tool-eval-bench",
                    "arguments": {"short": True, "no-preflight": True},
                },
            },
        )
        assert response.status_code == 202, response.text
        job = daemon.wait_state(response.json()["job_id"], timeout=180)
        assert job["state"] == "succeeded", job
        assert job["result"]["completed"] == 1 and job["result"]["status"] == "completed"
        bodies = [body for _, body in journal_rows(daemon, job["job_id"])]
        reports = [(b["activity_id"], b["timestamp"], b["message"]) for b in bodies if b["type"] == "feedback"]
        assert len(reports) == len(set(reports))  # one copy per report
        kinds = [b["kind"] for b in bodies if b["type"] == "benchmark"]
        assert kinds[0] == "schedule_started" and kinds[-1] == "run_complete" and "task_progress" not in kinds
        assert any(b.get("source") == "benchmark.tool-eval-bench" and b.get("stage") == "scenarios" for b in bodies)
