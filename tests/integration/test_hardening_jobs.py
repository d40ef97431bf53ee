"""Issue 9, classes 4, 5 and 7: stored values stay strict JSON, input is bounded, a cancel always takes effect.

Every test drives a real daemon with real workers; the awkward jobs are in
tests/integration/daemon_plugins.py.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path

import httpx
import pytest

from sparkrun.daemon.client import parse_sse
from sparkrun.daemon.journal import Journal
from sparkrun.daemon.worker import MAX_RESULT_BYTES
from tests.integration.daemon_harness import DaemonProcess, process_alive, wait_for

pytestmark = pytest.mark.integration


def _post(daemon: DaemonProcess, raw: str) -> httpx.Response:
    return daemon.client.post("/v1/jobs", content=raw.encode(), headers={"Content-Type": "application/json"})


def _listings_work(daemon: DaemonProcess) -> None:
    assert daemon.client.get("/v1/jobs").status_code == 200
    for args in (("daemon", "status"), ("daemon", "jobs", "list")):
        completed = daemon.run_cli(*args)
        assert completed.returncode == 0 and not completed.stderr, (args, completed.stderr)


# -- class 4: one bad value breaks nothing ---------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            '{"operation": "run", "arguments": {"recipe": "x", "overrides": {"s": 1e400}}}',
            "arguments.overrides.s is inf; JSON numbers must be finite",
        ),
        (
            '{"operation": "run", "arguments": {"recipe": "\\ud800x"}}',
            "arguments.recipe holds a lone surrogate (\\ud800 at character 0); strings must be valid Unicode",
        ),
        (
            '{"operation": "run", "arguments": {"recipe": "x", "overrides": {"k\\udc80": 1}}}',
            "arguments.overrides key 'k\\udc80' holds a lone surrogate (\\udc80 at character 1); "
            "strings must be valid Unicode",
        ),
        (
            '{"operation": "burst", "arguments": {"count": 100000000000000000000000}}',
            "arguments.count has 24 digits; JSON integers must fit in 64 bits (at most 9223372036854775807)",
        ),
    ],
    ids=["overflowing-float", "lone-surrogate", "lone-surrogate-key", "huge-integer"],
)
def test_a_value_that_is_not_strict_json_is_400_naming_the_field(daemon, raw, message):
    response = _post(daemon, raw)
    assert response.status_code == 400
    assert response.json() == {"error": message}
    assert daemon.client.get("/v1/jobs").json()["jobs"] == []


def test_results_are_made_safe_or_fail_clearly_and_listings_survive_a_restart(daemon):
    nan = daemon.submit("result", kind="nan")["job_id"]
    name = daemon.submit("result", kind="file_name")["job_id"]
    failed, succeeded = daemon.wait_state(nan), daemon.wait_state(name)
    assert failed["state"] == "failed"
    assert failed["error"] == {
        "type": "ResultError",
        "message": "the job's result is not strict JSON: result.score is nan; JSON numbers must be finite",
    }
    assert succeeded["state"] == "succeeded"
    assert succeeded["result"] == {"file": "model-\ufffd\ufffd.bin"}
    _listings_work(daemon)
    daemon.stop()
    daemon.start()
    _listings_work(daemon)
    assert daemon.job(name)["result"] == {"file": "model-\ufffd\ufffd.bin"}


def test_values_an_earlier_journal_let_in_are_served_as_strict_json(tmp_path):
    daemon = DaemonProcess(tmp_path / "d")
    journal = Journal(daemon.state_dir / "daemon" / "journal.sqlite3")
    journal.create_job("a" * 32, "sleep", {}, "1" * 32)
    journal.update_job("a" * 32, state="succeeded", finished_at=time.time())
    journal.close()
    db = sqlite3.connect(daemon.state_dir / "daemon" / "journal.sqlite3")
    db.execute(
        "UPDATE jobs SET arguments = ?, result = ?, error = ?",
        ('{"s": 1e999}', '{"score": NaN, "name": "x\\ud800"}', '{"type": "E", "message": "bad \\udc80 byte"}'),
    )
    db.commit()
    db.close()
    with daemon:
        _listings_work(daemon)
        job = daemon.job("a" * 32)
        assert (job["arguments"], job["result"]) == ({"s": None}, {"score": None, "name": "x\ufffd"})
        assert job["error"] == {"type": "E", "message": "bad \ufffd byte"}


# -- class 5: unbounded input ----------------------------------------------------------------


def test_an_endless_stderr_line_neither_hangs_the_job_nor_the_log(daemon):
    job_id = daemon.submit("stderr_flood", kib=8192)["job_id"]  # 8 MiB of "\r###" and not one newline
    job = daemon.wait_state(job_id, timeout=120)
    assert job["state"] == "succeeded", job
    log = (daemon.state_dir / "daemon" / "workers" / f"{job_id}.log").read_text()
    lines = log.split("\n")
    assert len(log) >= 8 * 2**20 and max(len(line) for line in lines) <= 64 * 1024


def test_a_job_stuck_after_an_endless_stderr_line_can_be_cancelled(daemon):
    job_id = daemon.submit("stderr_flood", kib=8192, then_sleep=120)["job_id"]
    worker = wait_for(lambda: daemon.job(job_id)["worker_pid"], what="the worker")
    log = daemon.state_dir / "daemon" / "workers" / f"{job_id}.log"
    wait_for(lambda: log.exists() and log.stat().st_size >= 8 * 2**20, timeout=60, what="the flood to be copied")
    response = daemon.client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    wait_for(lambda: not process_alive(worker), timeout=15, what="the worker to end")


def test_a_result_over_the_limit_fails_the_job_and_listings_stay_small(daemon):
    big = daemon.submit("result", size=60 * 2**20)["job_id"]
    fits = daemon.submit("result", size=3 * 2**20)["job_id"]
    failed, succeeded = daemon.wait_state(big, timeout=120), daemon.wait_state(fits, timeout=120)
    assert failed["state"] == "failed"
    assert failed["error"]["type"] == "ResultTooLarge"
    assert failed["error"]["message"].startswith("the job's result is too large (bytes=62914")
    assert failed["error"]["message"].endswith(f", limit={MAX_RESULT_BYTES})")
    assert succeeded["state"] == "succeeded" and len(succeeded["result"]["blob"]) == 3 * 2**20
    listing = daemon.client.get("/v1/jobs", params={"limit": 10000})
    assert len(listing.content) < 4096
    assert all("result" not in job and "arguments" not in job for job in listing.json()["jobs"])


def _rss_kib(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1])


def _deployment_with_log(daemon: DaemonProcess, log: Path) -> None:
    deployments = daemon.state_dir / "deployments"
    deployments.mkdir(parents=True, exist_ok=True)
    record = {
        "name": "big",
        "recipe": "big",
        "recipe_path": "/big.yaml",
        "runtime": "process",
        "hosts": ["localhost"],
        "port": 9,
        "command": "x",
        "pid": 999_999_999,
        "start_ticks": None,
        "log_path": str(log),
        "url": "http://127.0.0.1:9",
        "operation_id": "1" * 32,
        "started_at": time.time(),
    }
    (deployments / "big.json").write_text(json.dumps(record))


def test_a_huge_log_is_tailed_by_seeking_and_streamed_without_blocking_the_daemon(daemon, tmp_path):
    log = tmp_path / "big.log"
    with open(log, "wb") as file:
        file.write(b"".join(b"line %09d %s\n" % (n, b"y" * 80) for n in range(1_000_000)))  # ~100 MB
        file.write(b"\0" * 64)  # and an unfinished last line
    _deployment_with_log(daemon, log)
    before = _rss_kib(daemon.process.pid)
    tail = daemon.client.get("/v1/streams/logs", params={"name": "big", "tail": "3", "follow": "false"})
    lines = [event.data for event in parse_sse(iter(tail.text.split("\n"))) if event.name == "message"]
    assert lines[:-1] == [f"line {n:09d} {'y' * 80}" for n in (999_998, 999_999)] and lines[-1] == "\0" * 64

    received: list[int] = []

    def read_everything() -> None:
        with daemon.client.stream(
            "GET", "/v1/streams/logs", params={"name": "big", "follow": "false"}, timeout=300
        ) as response:
            received.append(sum(1 for line in response.iter_lines() if line.startswith("data: ")))

    reader = threading.Thread(target=read_everything)
    reader.start()
    answered, peak = [], before
    while reader.is_alive():  # the daemon keeps answering, and its memory stays flat, for the whole stream
        answered.append(httpx.get(f"{daemon.url}/v1/health", timeout=10).status_code)
        peak = max(peak, _rss_kib(daemon.process.pid))
    reader.join()
    assert received == [1_000_002]  # every line, the unfinished one, and the end event
    assert answered and set(answered) == {200}
    assert peak - before < 64 * 1024, (before, peak)


# -- class 7: races ------------------------------------------------------------------------------


def test_thirty_immediate_cancels_all_take_effect(start_daemon):
    workers = 4
    daemon = start_daemon(args=("--max-workers", str(workers)))
    jobs = []
    for _ in range(30):
        job_id = daemon.submit("sleep", seconds=30)["job_id"]
        response = daemon.client.post(f"/v1/jobs/{job_id}/cancel")
        assert response.status_code == 200, response.text
        jobs.append((job_id, response.json()["state"]))
    assert {state for _, state in jobs} == {"cancelled"}
    # Jobs start in order, one per free slot. Once jobs submitted after the thirty hold every slot at
    # the same time, none of the thirty is running or can still start: a job a cancel missed would be
    # holding a slot (for its 30 s sleep) and, once done, would not be in state cancelled.
    later = [daemon.submit("sleep", seconds=60)["job_id"] for _ in range(workers)]
    wait_for(
        lambda: all(daemon.job(job_id)["state"] == "running" for job_id in later),
        timeout=90,
        what=f"{workers} later jobs to hold every worker slot",
    )
    states = {daemon.job(job_id)["state"] for job_id, _ in jobs}
    assert states == {"cancelled"}
    assert not [pid for pid in (daemon.job(j)["worker_pid"] for j, _ in jobs) if pid and process_alive(pid)]
