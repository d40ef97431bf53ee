"""The sparkrun daemon as a real process: job lifecycle, restarts, cancellation, prompts, shutdown.

Every test starts its own ``sparkrun daemon serve`` (see :mod:`tests.integration.daemon_harness`)
with the test operations of :mod:`tests.integration.daemon_plugins`, and stops it, its
workers and any deployment afterwards.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import uuid
from typing import Any

import httpx
import pytest

from sparkrun.daemon.client import StreamEvent, parse_sse
from tests.integration.daemon_harness import (
    DaemonProcess,
    group_alive,
    journal_rows,
    message_events,
    process_alive,
    run_example,
    running_with_events,
    wait_for,
)

pytestmark = pytest.mark.integration


def _pending_prompt(daemon: DaemonProcess, job_id: str, kind: str) -> dict[str, Any]:
    """The job's pending prompt of ``kind`` (waiting until the worker asks it)."""

    def asked() -> dict[str, Any] | None:
        response = daemon.client.get(f"/v1/jobs/{job_id}/prompts")
        assert response.status_code == 200, response.text
        prompts = response.json()["prompts"]
        return prompts[0] if len(prompts) == 1 and prompts[0]["kind"] == kind else None

    return wait_for(asked, timeout=30, what=f"a {kind} prompt of job {job_id}")


def _answer(daemon: DaemonProcess, job_id: str, prompt: dict[str, Any], value: Any) -> httpx.Response:
    return daemon.client.post(f"/v1/jobs/{job_id}/prompts/{prompt['prompt_id']}", json={"answer": value})


# -- one daemon per state directory ---------------------------------------------------------


def test_a_second_daemon_on_the_same_state_directory_exits_non_zero(daemon):
    second = daemon.spawn()
    try:
        code = second.wait(timeout=60)
    finally:
        if second.poll() is None:
            second.kill()
            second.wait(timeout=10)
    output = daemon.last_log.read_text()
    assert code == 1, output
    assert output.strip().splitlines()[-1] == (
        f"error: a daemon already runs for this state directory (state_dir={daemon.state_dir}, "
        f"pid={daemon.process.pid}, url={daemon.url})"
    )
    # The first daemon is untouched: same record, same token, still serving.
    recorded = json.loads(daemon.info_path.read_text())
    assert (recorded["url"], recorded["pid"]) == (daemon.url, daemon.process.pid)
    assert daemon.token_path.read_text().strip() == daemon.token
    assert daemon.client.get("/v1/jobs").status_code == 200
    started = daemon.run_cli("daemon", "start", "--port", "0")
    assert started.returncode == 1
    assert started.stderr == (
        f"error: a daemon already runs for this state directory (state_dir={daemon.state_dir}, "
        f"pid={daemon.process.pid}, url={daemon.url})\n"
    )


# -- kill -9 and restart --------------------------------------------------------------------


def test_kill_9_mid_job_then_restart_marks_the_job_lost_and_keeps_its_events(daemon):
    job_id = daemon.submit("sleep", seconds=120)["job_id"]
    job = running_with_events(daemon, job_id, count=5)
    worker = job["worker_pid"]
    assert group_alive(worker)
    token = daemon.token
    daemon.kill9()
    seen = job["last_seq"]

    daemon.start()
    assert daemon.token == token  # clients keep working across restarts
    job = daemon.job(job_id)
    assert job["state"] == "lost"
    assert job["error"] == {"type": "WorkerLost", "message": "the daemon restarted while this job was unfinished"}
    assert job["finished_at"] is not None and job["result"] is None
    wait_for(lambda: not group_alive(worker), timeout=15, what=f"worker group {worker} to be gone")
    events = daemon.replay(job_id)
    messages = message_events(events)
    assert len(messages) >= seen and len(messages) == job["last_seq"]
    assert [event.seq for event in messages] == list(range(1, job["last_seq"] + 1))
    assert all(event.data["message"] == "sleeping" for event in messages)
    assert events[-1] == StreamEvent("end", {"state": "lost", "last_seq": job["last_seq"]}, None)
    cancel = daemon.client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancel.status_code == 409
    # New jobs work, with their own sequences.
    fresh = daemon.submit("burst", count=10)["job_id"]
    assert daemon.wait_state(fresh)["state"] == "succeeded"
    assert [event.seq for event in message_events(daemon.replay(fresh))] == list(range(1, 11))


# -- cancellation ---------------------------------------------------------------------------


def test_cancel_of_a_running_job_ends_its_worker(daemon):
    job_id = daemon.submit("sleep", seconds=120)["job_id"]
    worker = running_with_events(daemon, job_id)["worker_pid"]
    response = daemon.client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 200 and response.json()["job_id"] == job_id
    job = daemon.wait_state(job_id, timeout=30)
    assert job["state"] == "cancelled"
    assert job["error"] == {"type": "Cancelled", "message": "cancelled by request"}
    wait_for(lambda: not group_alive(worker), timeout=15, what=f"worker group {worker} to be gone")
    assert not process_alive(worker)
    assert daemon.replay(job_id)[-1] == StreamEvent("end", {"state": "cancelled", "last_seq": job["last_seq"]}, None)


def test_cancel_of_a_finished_job_is_409(daemon):
    job_id = daemon.submit("burst", count=3)["job_id"]
    assert daemon.wait_state(job_id)["state"] == "succeeded"
    response = daemon.client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 409
    assert response.json() == {"error": f"the job is already finished (job_id={job_id}, state=succeeded)"}
    assert daemon.job(job_id)["state"] == "succeeded"


def test_cancel_of_a_queued_job_removes_it_from_the_queue(start_daemon):
    daemon = start_daemon(args=("--max-workers", "1"))
    running = daemon.submit("sleep", seconds=120)["job_id"]
    running_with_events(daemon, running)
    queued = daemon.submit("sleep", seconds=0.1)
    assert queued["state"] == "queued"
    assert daemon.job(queued["job_id"])["state"] == "queued"
    response = daemon.client.post(f"/v1/jobs/{queued['job_id']}/cancel")
    assert response.status_code == 200
    job = response.json()
    assert job["state"] == "cancelled"
    assert job["error"] == {"type": "Cancelled", "message": "cancelled before it started"}
    assert job["worker_pid"] is None and job["started_at"] is None
    assert daemon.replay(queued["job_id"]) == [StreamEvent("end", {"state": "cancelled", "last_seq": 0}, None)]
    assert daemon.client.post(f"/v1/jobs/{running}/cancel").status_code == 200
    assert daemon.wait_state(running)["state"] == "cancelled"
    # The queue moves on: the cancelled job never runs, the next one does.
    after = daemon.submit("burst", count=2)["job_id"]
    assert daemon.wait_state(after)["state"] == "succeeded"
    assert daemon.job(queued["job_id"])["state"] == "cancelled"


def test_cancel_of_a_job_waiting_for_input(daemon):
    job_id = daemon.submit("ask")["job_id"]
    prompt = _pending_prompt(daemon, job_id, "confirm")
    worker = daemon.job(job_id)["worker_pid"]
    assert daemon.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    job = daemon.wait_state(job_id, timeout=30)
    assert job["state"] == "cancelled" and job["prompts"] == []
    wait_for(lambda: not group_alive(worker), timeout=15, what=f"worker group {worker} to be gone")
    late = _answer(daemon, job_id, prompt, True)
    assert late.status_code == 404
    assert late.json()["error"].startswith("no pending prompt with this id")


# -- prompts and secrets --------------------------------------------------------------------


@pytest.mark.parametrize(
    "stage, wrong, message",
    [
        ("confirm", "yes", "answer to a confirm prompt must be true or false, not str"),
        ("confirm", 1, "answer to a confirm prompt must be true or false, not int"),
        ("choice", "medium", "answer must be one of small, large (answer='medium')"),
        ("choice", None, "answer must be one of small, large (answer=None)"),
        ("secret", "", "answer to a secret prompt must be a non-empty string"),
        ("secret", 42, "answer to a secret prompt must be a non-empty string"),
    ],
)
def test_a_wrong_prompt_answer_is_400_and_the_prompt_stays_pending(daemon, stage, wrong, message):
    job_id = daemon.submit("ask")["job_id"]
    right = {"confirm": True, "choice": "small", "secret": f"pw-{uuid.uuid4().hex}"}
    for kind in ("confirm", "choice", "secret"):
        prompt = _pending_prompt(daemon, job_id, kind)
        if kind == stage:
            response = _answer(daemon, job_id, prompt, wrong)
            assert response.status_code == 400
            assert response.json() == {"error": message}
            assert daemon.job(job_id)["state"] == "waiting_input"
            assert daemon.client.get(f"/v1/jobs/{job_id}/prompts").json() == {"prompts": [prompt]}
        assert _answer(daemon, job_id, prompt, right[kind]).status_code == 200
    job = daemon.wait_state(job_id)
    assert job["state"] == "succeeded"
    assert job["result"] == {"proceed": True, "size": "small", "token_length": len(right["secret"])}


def test_answers_that_fit_no_pending_prompt(daemon):
    job_id = daemon.submit("ask")["job_id"]
    prompt = _pending_prompt(daemon, job_id, "confirm")
    missing = daemon.client.post(f"/v1/jobs/{job_id}/prompts/{prompt['prompt_id']}", json={"value": True})
    assert missing.status_code == 400
    assert missing.json() == {"error": "the body must be a JSON object with an answer"}
    unknown = daemon.client.post(f"/v1/jobs/{job_id}/prompts/nope", json={"answer": True})
    assert unknown.status_code == 404
    assert unknown.json() == {"error": f"no pending prompt with this id (job_id={job_id}, prompt_id='nope')"}
    assert _answer(daemon, job_id, prompt, True).status_code == 200
    again = _answer(daemon, job_id, prompt, True)  # already answered
    assert again.status_code == 404
    assert daemon.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


def test_prompts_complete_the_job_and_the_secret_is_nowhere(start_daemon):
    daemon = start_daemon(otel=True)  # traces on, so spans are searched for the secret too
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    job_id = daemon.submit("ask")["job_id"]
    assert daemon.wait_state(job_id, "waiting_input")["state"] == "waiting_input"
    prompts = daemon.client.get(f"/v1/jobs/{job_id}/prompts").json()["prompts"]
    assert len(prompts) == 1
    confirm = prompts[0]
    assert {key: confirm[key] for key in ("kind", "question", "choices")} == {
        "kind": "confirm",
        "question": "Proceed with the upload?",
        "choices": None,
    }
    assert daemon.job(job_id)["prompts"] == [confirm]
    response = _answer(daemon, job_id, confirm, True)
    assert response.status_code == 200 and response.json() == {"answered": confirm["prompt_id"]}
    choice = _pending_prompt(daemon, job_id, "choice")
    assert (choice["question"], choice["choices"]) == ("Which size?", ["small", "large"])
    assert _answer(daemon, job_id, choice, "large").status_code == 200
    token = _pending_prompt(daemon, job_id, "secret")
    assert token["question"] == "Registry token?"
    assert _answer(daemon, job_id, token, secret).status_code == 200

    job = daemon.wait_state(job_id)
    assert job["state"] == "succeeded", job
    assert job["result"] == {"proceed": True, "size": "large", "token_length": len(secret)}

    # The journaled feedback carries the redaction marker instead of the secret.
    stored = [body for _, body in journal_rows(daemon, job_id)]
    login = next(body for body in stored if body.get("stage") == "login")
    assert login["message"] == "logging in with [redacted]"
    assert login["metrics"] == {"token": "[redacted]", "size": "large"}
    legacy = next(body for body in stored if body["type"] == "log")
    assert legacy["message"] == "legacy plugin echoes [redacted]"
    worker_log = daemon.state_dir / "daemon" / "workers" / f"{job_id}.log"
    assert "stdout echoes [redacted]" in worker_log.read_text()
    assert (daemon.state_dir / "traces" / f"{job['operation_id']}.jsonl").exists()

    # ... and the secret is in no stream, no API answer, no file, no log.
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"follow": "false"}) as stream:
        replay = stream.read()
    assert b"[redacted]" in replay
    answers = [
        replay,
        daemon.client.get("/v1/jobs").content,
        daemon.client.get(f"/v1/jobs/{job_id}").content,
        daemon.client.get(f"/v1/jobs/{job_id}/prompts").content,
    ]
    daemon.stop()  # flushes everything it would write at exit
    files = {path: path.read_bytes() for path in daemon.root.rglob("*") if path.is_file()}
    names = {path.name for path in files}
    assert {"journal.sqlite3", f"{job_id}.log", f"{job['operation_id']}.jsonl"} <= names
    assert any(path.name.startswith("daemon-") for path in files)  # the daemon's own output
    for data in answers:
        assert secret.encode() not in data
    leaked = [str(path) for path, data in files.items() if secret.encode() in data]
    assert leaked == []


# -- legacy logging -------------------------------------------------------------------------


def test_plain_logging_from_a_context_free_thread_reaches_the_journal(daemon):
    job_id = daemon.submit("legacy")["job_id"]
    job = daemon.wait_state(job_id)
    assert job["state"] == "succeeded" and job["result"] == {"ok": True}
    logs = [event.data for event in message_events(daemon.replay(job_id)) if event.data["type"] == "log"]
    assert [(log["level"], log["message"], log["source"]) for log in logs] == [
        ("progress", "progress from a plain thread", "test.legacy"),
        ("warning", "warning from a plain thread", "test.legacy"),
    ]
    assert {log["operation_id"] for log in logs} == {job["operation_id"]}


# -- concurrency ----------------------------------------------------------------------------


def test_eight_concurrent_jobs_keep_gapless_per_job_sequences(start_daemon):
    daemon = start_daemon(args=("--max-workers", "8"))
    job_ids = [daemon.submit("burst", count=500)["job_id"] for _ in range(8)]
    live: dict[str, list[StreamEvent]] = {}
    errors: list[BaseException] = []

    def follow(job_id: str) -> None:
        try:
            with httpx.Client(base_url=daemon.url, headers=daemon.auth, timeout=60) as client:
                with client.stream("GET", f"/v1/jobs/{job_id}/events") as response:
                    assert response.status_code == 200
                    live[job_id] = list(parse_sse(response.iter_lines()))
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=follow, args=(job_id,), daemon=True) for job_id in job_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors and all(not thread.is_alive() for thread in threads)
    for job_id in job_ids:
        job = daemon.wait_state(job_id)
        assert (job["state"], job["first_retained"], job["last_seq"]) == ("succeeded", 1, 500)
        for events in (live[job_id], daemon.replay(job_id)):
            messages = message_events(events)
            assert [event.seq for event in messages] == list(range(1, 501))
            assert [event.data["current"] for event in messages] == list(range(500))
            assert {event.data["operation_id"] for event in messages} == {job["operation_id"]}
            assert events[-1] == StreamEvent("end", {"state": "succeeded", "last_seq": 500}, None)


# -- failing jobs and the launch pipeline ---------------------------------------------------


@pytest.mark.parametrize("arguments, message", [({}, "planned failure"), ({"message": "boom"}, "boom")])
def test_a_failing_job_is_failed_with_its_error(daemon, arguments, message):
    job_id = daemon.submit("fail", **arguments)["job_id"]
    job = daemon.wait_state(job_id)
    assert job["state"] == "failed"
    assert job["error"] == {"type": "RuntimeError", "message": message}
    assert job["result"] is None
    assert daemon.replay(job_id)[-1] == StreamEvent("end", {"state": "failed", "last_seq": job["last_seq"]}, None)


def test_run_and_stop_of_the_example_recipe_through_the_daemon(daemon):
    job = run_example(daemon)
    result = job["result"]
    assert (result["name"], result["state"], result["operation_id"]) == ("example-chat", "running", job["operation_id"])
    (pid,) = result["pids"]
    assert process_alive(pid)
    body = {"model": "tiny-echo", "messages": [{"role": "user", "content": "hello there"}]}
    reply = httpx.post(f"{result['url']}/v1/chat/completions", json=body, timeout=10)
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
    phases = [
        (event.data["slug"], event.data["status"])
        for event in message_events(daemon.replay(job["job_id"]))
        if event.data["type"] == "progress" and "slug" in event.data and "step" not in event.data
    ]
    assert ("runtime", "succeeded") in phases and phases[-1] == ("post_launch", "succeeded")

    status = daemon.wait_state(daemon.submit("status")["job_id"])
    assert [(item["name"], item["state"], item["pids"]) for item in status["result"]] == [
        ("example-chat", "running", [pid])
    ]
    stopped = daemon.wait_state(daemon.submit("stop", name="example-chat")["job_id"])
    assert stopped["state"] == "succeeded", stopped
    assert stopped["result"] == [
        {"name": "example-chat", "outcome": "terminated", "hosts": {"localhost": "terminated"}}
    ]
    wait_for(lambda: not process_alive(pid), timeout=15, what="the workload to exit")
    again = daemon.wait_state(daemon.submit("stop", name="example-chat")["job_id"])
    assert again["state"] == "failed" and again["error"]["type"] == "DeploymentError"


# -- shutdown ---------------------------------------------------------------------------------


def test_sigterm_ends_running_jobs_as_cancelled_and_removes_daemon_json(daemon):
    job_id = daemon.submit("sleep", seconds=120)["job_id"]
    worker = running_with_events(daemon, job_id)["worker_pid"]
    daemon.process.send_signal(signal.SIGTERM)
    daemon.process.wait(timeout=30)
    wait_for(lambda: not group_alive(worker), timeout=15, what=f"worker group {worker} to be gone")
    assert not daemon.info_path.exists()
    daemon.start()
    job = daemon.job(job_id)
    assert job["state"] == "cancelled", job  # "its running jobs end as cancelled", not lost


# -- regressions: bugs these tests found ---------------------------------------------------


def test_sigterm_stops_a_daemon_that_has_an_open_event_stream(daemon):
    job_id = daemon.submit("ask")["job_id"]
    daemon.wait_state(job_id, "waiting_input")
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=30) as response:
        assert response.status_code == 200
        daemon.process.send_signal(signal.SIGTERM)
        try:
            daemon.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail("the daemon still runs 10 s after SIGTERM while a client follows a job")
