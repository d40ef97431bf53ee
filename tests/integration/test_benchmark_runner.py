"""The benchmark runner with the example fake framework: outcomes, resume, Ctrl+C, timeouts, traces, limits.

The fake tool (examples/benchmarks/fake_framework.py) is a real process: it writes progress lines on
stderr, a result file, and crashes, measures nothing, hangs or floods hostile lines when asked. The
target is the example chat recipe, launched for each run and stopped after it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time

import pytest

from otel.local_store import TraceStore
from sparkrun.core.deployments import DeploymentStore
from tests.integration.benchmark_harness import EXAMPLE_RECIPE, Bench
from tests.integration.daemon_harness import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def bench(tmp_path):
    harness = Bench(tmp_path)
    try:
        yield harness
    finally:
        for pid in harness.leftovers():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for deployment in DeploymentStore(harness.state_dir).all():
            for placement in deployment.placements:
                if placement.identity.matches():
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(placement.pid, signal.SIGKILL)


def _benchmark_id(output: str) -> str:
    return re.search(r"bench_[0-9a-f]{12}", output).group(0)


def _events(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines()]


def test_a_run_reports_every_outcome_and_resume_retries_the_failed_task(bench):
    done = bench.run_fake(mode="ok,flaky,nothing", tasks=3)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    table = [line for line in lines if line.startswith("t=")]
    assert [line.split()[:2] for line in table] == [["t=0", "succeeded"], ["t=1", "failed"], ["t=2", "failed"]]
    assert "fake exited with code 3" in table[1] and "fake measured nothing" in table[2]
    benchmark_id = _benchmark_id(done.stdout)
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: not every task succeeded (benchmark_id={benchmark_id}); "
        f"retry with `sparkrun benchmark resume {benchmark_id}`"
    )
    state = bench.state(benchmark_id)
    assert (state["completed"], sorted(state["failed"])) == ([0], [1, 2])
    assert [s["status"] for s in state["sessions"]] == ["partial"]
    assert not DeploymentStore(bench.state_dir).all()  # the launched workload is stopped

    resumed = bench.cli("resume", benchmark_id, "--json")
    assert resumed.returncode == 1  # the flaky task passes now; "nothing" still measures nothing
    result = _events(resumed.stdout)[-1]
    assert result["resumed"] is True and (result["completed"], result["failed"]) == (2, 1)
    attempts = {t["label"]: t["attempt"] for t in result["tasks"]}
    assert attempts == {"t=0": 1, "t=1": 2, "t=2": 2}  # only failed and pending tasks ran again
    status = bench.cli("status", benchmark_id)
    assert "partial" in status.stdout and re.search(r"1\s+t=1\s+completed\s+2", status.stdout)
    listed = bench.cli("list")
    assert benchmark_id in listed.stdout and "2/3" in listed.stdout
    results = bench.cli("results", "--json")
    assert json.loads(results.stdout)["tasks"][0]["figures"] == {"items": 10, "value": 1.429}


def test_counters_follow_the_contract_and_the_callback_gets_the_same_envelopes(tmp_path):
    import importlib.util

    from sparkrun import api
    from sparkrun.application import initialize

    spec = importlib.util.spec_from_file_location(
        "fake_framework_api", EXAMPLE_RECIPE.parents[1] / "benchmarks" / "fake_framework.py"
    )
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    events: list[dict] = []
    calls: list[dict] = []
    sctx = initialize(state_dir=tmp_path / "state", events=events.append)
    request = api.BenchmarkRequest(
        str(EXAMPLE_RECIPE), "fake", arguments={"tasks": "2", "lines": "5", "mode": "ok,crash"}
    )
    result = api.benchmark(request, sctx=sctx, callback=calls.append)
    assert (result.completed, result.failed, result.status) == (1, 1, "partial")
    kinds = [c["kind"] for c in calls]
    assert kinds[0] == "schedule_started" and kinds[-1] == "run_complete"
    assert kinds.count("task_start") == kinds.count("task_end") == 2 and "results_update" in kinds
    progress = [c["feedback"] for c in calls if c["kind"] == "task_progress"]
    attempts = [e for e in events if e.get("source") == "benchmark.fake"]
    assert progress == attempts  # the very envelopes the subscriber saw, one each
    ok = [e for e in attempts if e["metrics"]["task_index"] == 0]
    assert [(e.get("current"), e.get("total"), e.get("total_kind")) for e in ok] == [
        (0, None, "unknown"),
        (1, 5, "exact"),
        (5, 5, "exact"),
        (5, 5, "exact"),
    ] or ok[-1]["current"] == ok[-1]["total"] == 5
    assert ok[-1]["status"] == "succeeded" and ok[-1]["metrics"]["result.value"] == 0.714
    assert {e["metrics"]["benchmark_id"] for e in attempts} == {result.benchmark_id}
    crashed = [e for e in attempts if e["metrics"]["task_index"] == 1]
    assert crashed[-1]["status"] == "failed" and crashed[-1]["level"] == "error"
    assert all(e.get("total_kind") != "upper_bound" for e in events if e.get("type") == "feedback")
    ids = {e["activity_id"] for e in attempts}
    assert len(ids) == 2 and all(i.endswith("/attempt-1") for i in ids)  # a fresh activity per attempt
    benchmark_events = [e for e in events if e["type"] == "benchmark"]
    assert "task_progress" not in {e["kind"] for e in benchmark_events}


def test_the_trace_has_the_run_its_tasks_and_each_attempt_at_its_real_times(bench):
    done = bench.run_fake("--json", mode="ok", tasks=2, lines=3)
    assert done.returncode == 0, done.stderr
    result = _events(done.stdout)[-1]
    spans = TraceStore.in_state_dir(bench.state_dir).spans(result["operation_id"])
    by_id = {s.span_id: s for s in spans}
    attempts = [s for s in spans if s.name == "benchmark.fake"]
    assert len(attempts) == 2
    for attempt in attempts:
        task = by_id[attempt.parent_span_id]
        assert task.name == "benchmark.task" and by_id[task.parent_span_id].name == "benchmark.run"
        assert attempt.attributes["sparkrun.metric.result.value"] == 0.429  # the framework's figures
        started = attempt.attributes["sparkrun.metric.started_at"]
        assert abs(attempt.start_ns - started * 1e9) < 1_000  # its real start
        assert attempt.start_ns >= task.start_ns and attempt.end_ns <= task.end_ns + 1_000_000
    launch = [s for s in spans if s.name == "launch.runtime"]
    assert launch  # the recipe was launched inside the benchmark's operation


def test_ctrl_c_marks_the_run_interrupted_stops_everything_and_resume_finishes_it(bench):
    process = subprocess.Popen(
        bench.argv("run", str(EXAMPLE_RECIPE), "--framework", "fake", "--arg", "mode=hang-once,ok", "--arg", "tasks=2"),
        env=bench.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: list(bench.state_dir.rglob("hang-once.happened")), timeout=60, what="the tool to hang")
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: interrupted; the run is marked interrupted")
    assert not bench.leftovers() and not DeploymentStore(bench.state_dir).all()
    (run_dir,) = (bench.state_dir / "benchmarks").iterdir()
    state = bench.state(run_dir.name)
    assert state["sessions"][-1]["status"] == "interrupted" and state["completed"] == []
    resumed = bench.cli("resume", run_dir.name)
    assert resumed.returncode == 0, resumed.stderr
    assert bench.state(run_dir.name)["sessions"][-1]["status"] == "completed"


def test_a_task_past_its_timeout_is_stopped_and_failed(bench):
    done = bench.run_fake("--task-timeout", "2", mode="hang")
    assert done.returncode == 1
    assert "timed out after 2 s" in done.stdout
    assert not bench.leftovers()


def test_a_killed_run_is_found_crashed_and_resumes(bench):
    process = subprocess.Popen(
        bench.argv("run", str(EXAMPLE_RECIPE), "--framework", "fake", "--arg", "mode=hang-once"),
        env=bench.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(lambda: list(bench.state_dir.rglob("hang-once.happened")), timeout=60, what="the fake tool to hang")
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    for pid in bench.leftovers():
        os.kill(pid, signal.SIGKILL)
    for deployment in DeploymentStore(bench.state_dir).all():
        for pid in deployment.pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
    status = bench.cli("status")
    assert "crashed" in status.stdout and "1 session(s) crashed" in status.stdout
    (run_dir,) = (bench.state_dir / "benchmarks").iterdir()
    resumed = bench.cli("resume", run_dir.name)
    assert resumed.returncode == 0, resumed.stderr


def test_hostile_progress_lines_cannot_break_the_run_or_the_terminal(bench, tmp_path):
    events_file = tmp_path / "events.jsonl"
    done = bench.run_fake("--events-jsonl", str(events_file), mode="hostile", lines=30)
    assert done.returncode == 0, done.stderr
    recorded = [json.loads(line) for line in events_file.read_text().splitlines()]
    final = [e for e in recorded if e.get("source") == "benchmark.fake" and e.get("status") == "succeeded"]
    assert final[0]["current"] == final[0]["total"] == 30  # exact despite the garbage between the lines
    assert "\x1b" not in done.stdout + events_file.read_text()
    (log,) = (bench.state_dir / "benchmarks").rglob("log.txt")
    assert max(len(line) for line in log.read_bytes().splitlines()) <= 65_536  # endless lines are cut


def test_a_flood_of_progress_is_throttled_but_the_final_count_is_exact(bench, tmp_path):
    events_file = tmp_path / "events.jsonl"
    done = bench.run_fake("--events-jsonl", str(events_file), lines=100_000, timeout=300)
    assert done.returncode == 0, done.stderr
    attempt = [json.loads(line) for line in events_file.read_text().splitlines()]
    attempt = [e for e in attempt if e.get("source") == "benchmark.fake"]
    assert len(attempt) < 2_000
    assert attempt[-1]["current"] == attempt[-1]["total"] == 100_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--framework", "lama-benchy"),
            r"unknown benchmark framework \(framework='lama-benchy', known: .*\); did you mean 'llama-benchy'\?",
        ),
        (
            ("--framework", "fake", "--arg", "result=x"),
            r"--arg sets result, which sparkrun sets itself for fake \(reserved: result\)",
        ),
        (
            ("--framework", "fake", "--arg", "Bad_Flag=1"),
            r"--arg has the argument 'Bad_Flag'; arguments are kebab-case flag names .*",
        ),
        (("--framework", "fake", "--arg", "mode=warp"), r"--arg mode is 'warp'; the fake tool knows ok, crash, .*"),
    ],
    ids=["unknown-framework", "reserved", "flag-name", "framework-check"],
)
def test_bad_run_requests_are_one_line_naming_the_field(bench, args, message):
    done = bench.cli("run", str(EXAMPLE_RECIPE), *args)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert re.fullmatch("error: " + message, done.stderr.strip().splitlines()[-1]), done.stderr


def test_bad_schedules_and_ids_are_one_line_naming_the_field(bench, tmp_path):
    schedule = tmp_path / "schedule.yaml"
    schedule.write_text("title: x\ndepths: [1]\n")
    done = bench.cli("run", str(EXAMPLE_RECIPE), "--framework", "fake", "--schedule", str(schedule))
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: {schedule}: unknown schedule key 'depths' for fake; expected title, arguments, tasks"
    )
    schedule.write_text("- not a mapping\n")
    done = bench.cli("run", str(EXAMPLE_RECIPE), "--framework", "fake", "--schedule", str(schedule))
    assert done.stderr.strip().splitlines()[-1] == f"error: {schedule}: a schedule is a mapping, not list"
    missing = bench.cli("resume", "bench_000000000000")
    assert (
        missing.stderr.strip()
        .splitlines()[-1]
        .startswith("error: no benchmark run with this id (benchmark_id=bench_000000000000")
    )
    bad = bench.cli("resume", "../../etc")
    assert bad.stderr.strip().splitlines()[-1] == (
        "error: benchmark id is '../../etc'; ids look like bench_ and 12 hex digits"
    )
    timeout = bench.cli("run", str(EXAMPLE_RECIPE), "--framework", "fake", "--task-timeout", "0")
    assert timeout.returncode == 2 and "--task-timeout" in timeout.stderr


def test_a_second_run_of_the_same_benchmark_waits_for_none_it_is_refused(bench):
    first = subprocess.Popen(
        bench.argv("run", str(EXAMPLE_RECIPE), "--framework", "fake", "--arg", "mode=hang"),
        env=bench.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(bench.leftovers, timeout=60, what="the first run's tool")
        second = bench.cli("run", str(EXAMPLE_RECIPE), "--framework", "fake", "--arg", "mode=hang")
        assert second.returncode == 1
        assert re.search(
            r"error: the run is already running \(benchmark_id=bench_\w+, held by pid \d+\)", second.stderr
        )
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(60)
    time.sleep(0)
