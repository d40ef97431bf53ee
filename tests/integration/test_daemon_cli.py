"""The sparkrun daemon as a real process: the ``sparkrun daemon ...`` CLI and the /metrics endpoint.

Every test starts its own ``sparkrun daemon serve`` (see :mod:`tests.integration.daemon_harness`)
with the test operations of :mod:`tests.integration.daemon_plugins`, and stops it, its
workers and any deployment afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from otel.local_store import TraceStore
from tests.integration.daemon_harness import ROOT, DaemonProcess, daemon_environment, process_alive, wait_for

pytestmark = pytest.mark.integration


# -- the CLI --------------------------------------------------------------------------------


def test_cli_call_wait_prints_the_result(daemon):
    completed = daemon.run_cli("daemon", "call", "sleep", "--arg", "seconds=0.2", "--wait")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == {"slept": 0.2}
    (listed,) = daemon.client.get("/v1/jobs").json()["jobs"]
    job = daemon.job(listed["job_id"])
    assert (job["operation"], job["arguments"], job["state"]) == ("sleep", {"seconds": 0.2}, "succeeded")


def test_cli_call_wait_of_a_failing_job_exits_1(daemon):
    completed = daemon.run_cli("daemon", "call", "fail", "--wait")
    assert completed.returncode == 1
    (job,) = daemon.client.get("/v1/jobs").json()["jobs"]
    assert completed.stderr == f"job {job['job_id']} failed: planned failure\n"


def test_cli_call_rejects_a_bad_argument_with_the_daemons_error(daemon):
    completed = daemon.run_cli("daemon", "call", "sleep", "--arg", "seconds=x")
    assert completed.returncode == 1
    assert completed.stderr == "error: argument seconds must be float, not str ('x') (status=400)\n"


def test_cli_jobs_events_prints_ndjson_with_seqs(daemon):
    job_id = daemon.submit("burst", count=5)["job_id"]
    daemon.wait_state(job_id)
    completed = daemon.run_cli("daemon", "jobs", "events", job_id, "--no-follow", "--json")
    assert completed.returncode == 0, completed.stderr
    lines = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [(line["seq"], line["event"]) for line in lines] == [(n, "message") for n in range(1, 6)] + [(None, "end")]
    assert [line["data"]["current"] for line in lines[:-1]] == list(range(5))
    assert lines[-1]["data"] == {"state": "succeeded", "last_seq": 5}
    resumed = daemon.run_cli("daemon", "jobs", "events", job_id, "--no-follow", "--json", "--after", "3")
    assert [json.loads(line)["seq"] for line in resumed.stdout.splitlines()] == [4, 5, None]


def test_cli_cancel_of_a_finished_job_exits_1_with_an_error_line(daemon):
    job_id = daemon.submit("burst", count=2)["job_id"]
    daemon.wait_state(job_id)
    completed = daemon.run_cli("daemon", "jobs", "cancel", job_id)
    assert completed.returncode == 1
    assert completed.stderr == (f"error: the job is already finished (job_id={job_id}, state=succeeded) (status=409)\n")


def test_cli_status_counts_jobs_by_state(daemon):
    daemon.wait_state(daemon.submit("burst", count=2)["job_id"])
    daemon.wait_state(daemon.submit("fail")["job_id"])
    completed = daemon.run_cli("daemon", "status")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == f"daemon at {daemon.url} (pid {daemon.process.pid}): failed 1, succeeded 1\n"


@pytest.mark.parametrize("as_json", [False, True])
def test_cli_status_without_a_daemon_exits_3(tmp_path, as_json):
    state = tmp_path / "state"
    completed = subprocess.run(
        [sys.executable, "-m", "sparkrun", "daemon", "status", "--state-dir", str(state), *(["--json"] * as_json)],
        cwd=ROOT,
        env=daemon_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (completed.returncode, completed.stderr) == (3, "")
    expected = '{"running": false}' if as_json else f"the daemon is not running (state_dir={state})"
    assert completed.stdout == expected + "\n"


def test_cli_status_json_of_a_running_daemon(daemon):
    daemon.wait_state(daemon.submit("burst", count=2)["job_id"])
    completed = daemon.run_cli("daemon", "status", "--json")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == {
        "running": True,
        "url": daemon.url,
        "pid": daemon.process.pid,
        "jobs": {"succeeded": 1},
    }


def test_cli_call_ask_wait_answers_prompts_from_stdin(daemon):
    secret = f"cli-{uuid.uuid4().hex}"
    completed = daemon.run_cli("daemon", "call", "ask", "--wait", input=f"y\nlarge\n{secret}\n")
    assert completed.returncode == 0, completed.stderr
    assert "Proceed with the upload?" in completed.stdout and "Which size?" in completed.stdout
    assert "Registry token?" in completed.stderr + completed.stdout
    result = json.loads(completed.stdout[completed.stdout.index("{") :])
    assert result == {"proceed": True, "size": "large", "token_length": len(secret)}
    assert secret not in completed.stdout + completed.stderr


def test_cli_jobs_trace_shows_the_jobs_trace_and_re_exports_it(start_daemon):
    daemon = start_daemon(otel=True)  # SPARKRUN_OTEL unset: workers trace their jobs
    job_id = daemon.submit("burst", count=5)["job_id"]
    job = daemon.wait_state(job_id)
    operation_id = job["operation_id"]
    completed = daemon.run_cli("daemon", "jobs", "trace", job_id)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stdout.splitlines()
    assert lines[0] == f"trace {operation_id} (job {job_id}, succeeded)"
    assert lines[1].split()[:4] == ["span", "host", "status", "duration"]
    assert lines[2].startswith("sparkrun.burst") and "test.burst" in lines[3]
    store = TraceStore.in_state_dir(daemon.state_dir)
    before = store.spans(operation_id)
    assert before and {span.trace_id for span in before} == {operation_id}

    exported = daemon.run_cli("daemon", "jobs", "trace", job_id, "--export")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout == (
        f"exported 5 events of operation {operation_id} -> local store {daemon.state_dir / 'traces'}\n"
    )
    batches = [json.loads(line) for line in store.path_of(operation_id).read_text().splitlines()]
    assert len(batches) == 2

    def ids(batch: dict) -> set[tuple[str, str, str]]:
        return {
            (span["traceId"], span["spanId"], span["name"])
            for resource in batch["resourceSpans"]
            for scope in resource["scopeSpans"]
            for span in scope["spans"]
        }

    assert ids(batches[1]) == ids(batches[0])  # the re-export reuses the ids
    assert {trace_id for trace_id, _, _ in ids(batches[1])} == {operation_id}


def test_cli_jobs_trace_without_a_stored_trace_exits_1(daemon):
    job_id = daemon.submit("burst", count=2)["job_id"]
    job = daemon.wait_state(job_id)
    completed = daemon.run_cli("daemon", "jobs", "trace", job_id)
    assert completed.returncode == 1
    assert completed.stderr == (
        f"error: no trace for this job in the local store (operation_id={job['operation_id']}); try --export\n"
    )


def test_cli_start_status_stop_and_start_again(tmp_path):
    daemon = DaemonProcess(tmp_path / "background")  # not started here: the CLI starts it
    try:
        for _ in range(2):
            started = daemon.run_cli("daemon", "start", "--port", "0")
            assert started.returncode == 0, started.stderr
            info = json.loads(daemon.info_path.read_text())
            assert (
                started.stdout == f"daemon started at {info['url']} (pid {info['pid']}); console: {info['url']}/ui/\n"
            )
            status = daemon.run_cli("daemon", "status")
            assert status.stdout == f"daemon at {info['url']} (pid {info['pid']}): no jobs\n"
            stopped = daemon.run_cli("daemon", "stop")
            assert stopped.returncode == 0 and stopped.stdout == f"daemon stopped (pid {info['pid']})\n"
            wait_for(lambda: not process_alive(info["pid"]), timeout=15, what="the daemon to exit")  # noqa: B023
            assert not daemon.info_path.exists()
        again = daemon.run_cli("daemon", "stop")
        assert (again.returncode, again.stdout, again.stderr) == (0, "the daemon is not running\n", "")
    finally:
        _kill_background_daemon(daemon)


def _kill_background_daemon(daemon: DaemonProcess) -> None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        pid = json.loads(daemon.info_path.read_text())["pid"]
        if process_alive(pid) and b"sparkrun" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    daemon.stop()


# -- Prometheus endpoint -------------------------------------------------------------------


def test_metrics_need_the_token_and_count_what_jobs_reported(daemon):
    assert httpx.get(f"{daemon.url}/metrics", timeout=10).status_code == 401
    relay = daemon.submit("relay")
    daemon.wait_state(relay["job_id"], "succeeded")
    failing = daemon.submit("fail")
    daemon.wait_state(failing["job_id"], "failed")
    text = httpx.get(f"{daemon.url}/metrics", headers=daemon.auth, timeout=10).text
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name_labels, _, value = line.rpartition(" ")
            samples[name_labels] = float(value)

    def value(name: str, **labels: str) -> float:
        found = [
            v
            for key, v in samples.items()
            if key.startswith(name + "{") and all(f'{k}="{want}"' in key for k, want in labels.items())
        ]
        assert found, f"no {name} with {labels} in /metrics"
        return sum(found)

    assert value("sparkrun_daemon_jobs", state="succeeded") == 1 and value("sparkrun_daemon_jobs", state="failed") == 1
    assert value("sparkrun_feedback_events_total", sparkrun_source="test.relay", sparkrun_level="warning") == 1
    assert value("sparkrun_feedback_events_total", sparkrun_level="error", host_name="spark-2") == 1
    assert value("sparkrun_transfer_bytes_total", host_name="spark-1") == 3_145_728
    assert value("sparkrun_activity_duration_seconds_count", sparkrun_status="failed", sparkrun_stage="verify") == 1
    assert value("sparkrun_operation_duration_seconds_count", sparkrun_operation="fail", sparkrun_outcome="failed") == 1
    assert value("sparkrun_daemon_journal_events_total") >= 8
    assert value("sparkrun_daemon_stream_subscribers") == 0
    assert relay["operation_id"] not in text and relay["job_id"] not in text  # ids are never labels


def test_metrics_can_be_turned_off(start_daemon):
    daemon = start_daemon(args=("--no-metrics",))
    response = httpx.get(f"{daemon.url}/metrics", headers=daemon.auth, timeout=10)
    assert response.status_code == 404
    assert response.json() == {"error": "metrics are disabled for this daemon (--no-metrics)"}
