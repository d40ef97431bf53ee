"""The sparkrun daemon as a real process: auth, validation, SSE cursors, workers, prompts, CLI.

Every test starts its own ``sparkrun daemon serve`` (see :mod:`tests.integration.daemon_harness`)
with the test operations of :mod:`tests.integration.daemon_plugins`, and stops it, its
workers and any deployment afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from otel.local_store import TraceStore
from sparkrun.daemon.client import DaemonClient, StreamEvent, parse_sse
from sparkrun.errors import DaemonError
from tests.integration.daemon_harness import (
    ROOT,
    DaemonProcess,
    daemon_environment,
    group_alive,
    process_alive,
    wait_for,
)

pytestmark = pytest.mark.integration

EXAMPLE_RECIPE = ROOT / "examples" / "recipes" / "example-chat.yaml"
KNOWN_OPERATIONS = "ask, burst, fail, legacy, logs, relay, run, sleep, status, stop"
UNKNOWN_JOB = "0123456789abcdef0123456789abcdef"


@pytest.fixture
def start_daemon(tmp_path) -> Iterator[Any]:
    """``start_daemon(**options)`` starts a daemon; all of them are stopped after the test."""
    started: list[DaemonProcess] = []

    def start(**options: Any) -> DaemonProcess:
        daemon = DaemonProcess(tmp_path / f"daemon-{len(started)}", **options)
        started.append(daemon)
        return daemon.start()

    try:
        yield start
    finally:
        for daemon in reversed(started):
            daemon.stop()


@pytest.fixture
def daemon(start_daemon) -> DaemonProcess:
    return start_daemon()


def _messages(events: list[StreamEvent]) -> list[StreamEvent]:
    return [event for event in events if event.name == "message"]


def _journal_rows(daemon: DaemonProcess, job_id: str) -> list[tuple[int, dict]]:
    """The job's events as stored in the journal, read straight from SQLite."""
    db = sqlite3.connect(f"file:{daemon.state_dir / 'daemon' / 'journal.sqlite3'}?mode=ro", uri=True, timeout=5)
    try:
        rows = db.execute("SELECT seq, body FROM events WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()
    finally:
        db.close()
    return [(seq, json.loads(body)) for seq, body in rows]


def _running_with_events(daemon: DaemonProcess, job_id: str, count: int = 1) -> dict[str, Any]:
    """The job once it runs and has journaled at least ``count`` events."""

    def ready() -> dict[str, Any] | None:
        job = daemon.job(job_id)
        assert job["state"] in ("queued", "running"), job
        return job if job["state"] == "running" and job["last_seq"] >= count else None

    return wait_for(ready, timeout=30, what=f"job {job_id} to run and report {count} event(s)")


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


def _open_stream(daemon: DaemonProcess, stack: contextlib.ExitStack, job_id: str, **params: Any) -> Any:
    """A following stream of ``job_id`` that has delivered its first event (so its subscriber is counted)."""
    response = stack.enter_context(
        daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"after": 0, **params}, timeout=30)
    )
    assert response.status_code == 200, response.read().decode()
    events = parse_sse(response.iter_lines())
    assert next(events).name == "message"
    return events


# -- 1. authentication and exposure ---------------------------------------------------------


def test_health_answers_without_a_token(daemon):
    response = httpx.get(f"{daemon.url}/v1/health", timeout=10)
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


@pytest.mark.parametrize("header", [None, "Basic {token}", "Bearer", "{token}"])
def test_a_request_without_a_bearer_token_is_401(daemon, header):
    headers = {} if header is None else {"Authorization": header.format(token=daemon.token)}
    for method, path in (("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", f"/v1/jobs/{UNKNOWN_JOB}/events")):
        response = httpx.request(method, f"{daemon.url}{path}", headers=headers, timeout=10)
        assert response.status_code == 401, (method, path)
        assert response.json() == {"error": "missing bearer token (header=Authorization)"}


@pytest.mark.parametrize("wrong", ["not-the-token", "{token}x", "{token_prefix}"])
def test_a_wrong_token_is_403(daemon, wrong):
    token = wrong.format(token=daemon.token, token_prefix=daemon.token[:-1])
    response = httpx.get(f"{daemon.url}/v1/jobs", headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert response.status_code == 403
    assert response.json() == {"error": "wrong bearer token (header=Authorization)"}
    # The right token works, whatever the case of the scheme.
    right = httpx.get(f"{daemon.url}/v1/jobs", headers={"Authorization": f"bearer {daemon.token}"}, timeout=10)
    assert right.status_code == 200 and right.json() == {"jobs": []}


def test_the_token_file_is_private_to_its_owner(daemon):
    assert stat.S_IMODE(daemon.token_path.stat().st_mode) == 0o600
    assert stat.S_IMODE(daemon.token_path.parent.stat().st_mode) == 0o700
    assert len(daemon.token) >= 32
    info = json.loads(daemon.info_path.read_text())
    assert info == {"url": daemon.url, "pid": daemon.process.pid}
    assert daemon.url.startswith("http://127.0.0.1:")


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.com"])
def test_a_non_loopback_host_is_refused_without_allow_remote(tmp_path, host):
    state = tmp_path / "state"
    completed = subprocess.run(
        [sys.executable, "-m", "sparkrun", "daemon", "serve", "--state-dir", str(state), "--port", "0", "--host", host],
        cwd=ROOT,
        env=daemon_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 1
    assert completed.stderr.strip().splitlines()[-1] == (
        f"error: refusing to listen on a non-loopback address (host={host}); "
        "pass --allow-remote to expose the daemon beyond this machine"
    )
    assert not (state / "daemon" / "daemon.json").exists()


def test_allow_remote_listens_beyond_loopback_and_warns(start_daemon):
    daemon = start_daemon(args=("--host", "0.0.0.0", "--allow-remote"))
    assert daemon.url.startswith("http://0.0.0.0:")
    port = daemon.url.rsplit(":", 1)[1]
    assert httpx.get(f"http://127.0.0.1:{port}/v1/health", timeout=10).status_code == 200
    assert httpx.get(f"http://127.0.0.1:{port}/v1/jobs", timeout=10).status_code == 401
    assert "the daemon is reachable from other machines; guard its token" in daemon.output()


# -- 2. request validation ------------------------------------------------------------------

JOB_ENDPOINTS = [
    ("GET", "/v1/jobs/{job_id}"),
    ("GET", "/v1/jobs/{job_id}/events"),
    ("POST", "/v1/jobs/{job_id}/cancel"),
    ("GET", "/v1/jobs/{job_id}/prompts"),
]


@pytest.mark.parametrize("method, path", [*JOB_ENDPOINTS, ("POST", "/v1/jobs/{job_id}/prompts/abc")])
@pytest.mark.parametrize("job_id", ["not-a-job", "0123456789ABCDEF0123456789ABCDEF", "0123456789abcdef0123456789abcde"])
def test_a_malformed_job_id_is_400(daemon, method, path, job_id):
    response = daemon.client.request(method, path.format(job_id=job_id), json={"answer": True})
    assert response.status_code == 400
    assert response.json() == {"error": f"malformed job id (job_id={job_id!r}, expected 32 lowercase hex characters)"}


@pytest.mark.parametrize("method, path", JOB_ENDPOINTS)
def test_an_unknown_job_is_404(daemon, method, path):
    response = daemon.client.request(method, path.format(job_id=UNKNOWN_JOB))
    assert response.status_code == 404
    assert response.json() == {"error": f"unknown job (job_id={UNKNOWN_JOB})"}


def test_an_answer_for_an_unknown_job_is_404(daemon):
    response = daemon.client.post(f"/v1/jobs/{UNKNOWN_JOB}/prompts/abc", json={"answer": True})
    assert response.status_code == 404
    assert response.json() == {"error": f"no pending prompt with this id (job_id={UNKNOWN_JOB}, prompt_id='abc')"}


@pytest.mark.parametrize("operation", ["nope", None, 7])
def test_an_unknown_operation_is_400_naming_the_known_ones(daemon, operation):
    response = daemon.client.post("/v1/jobs", json={"operation": operation, "arguments": {}})
    assert response.status_code == 400
    assert response.json() == {"error": f"unknown operation (operation={operation!r}, known: {KNOWN_OPERATIONS})"}
    assert daemon.client.get("/v1/jobs").json() == {"jobs": []}


@pytest.mark.parametrize(
    "operation, arguments, message",
    [
        ("run", {"recipe": "x", "port": "80"}, "argument port must be int, not str ('80')"),
        ("sleep", {"seconds": "x"}, "argument seconds must be float, not str ('x')"),
        ("burst", {"count": True}, "argument count must be int, not bool (True)"),
        ("burst", {"count": 1.5}, "argument count must be int, not float (1.5)"),
        ("stop", {"all": "yes"}, "argument all must be bool, not str ('yes')"),
        ("run", {"recipe": "x", "overrides": []}, "argument overrides must be dict, not list ([])"),
        ("run", {"recipe": 5}, "argument recipe must be str, not int (5)"),
    ],
)
def test_an_argument_of_the_wrong_type_is_400_naming_it(daemon, operation, arguments, message):
    response = daemon.client.post("/v1/jobs", json={"operation": operation, "arguments": arguments})
    assert response.status_code == 400
    assert response.json() == {"error": message}
    assert daemon.client.get("/v1/jobs").json() == {"jobs": []}


@pytest.mark.parametrize(
    "operation, arguments, message",
    [
        ("sleep", {"bogus": 1}, "unknown argument 'bogus' for operation sleep (expected: seconds)"),
        ("status", {"name": "x"}, "unknown argument 'name' for operation status (expected: none)"),
    ],
)
def test_an_unknown_argument_is_400(daemon, operation, arguments, message):
    response = daemon.client.post("/v1/jobs", json={"operation": operation, "arguments": arguments})
    assert response.status_code == 400
    assert response.json() == {"error": message}


def test_a_missing_required_argument_is_400(daemon):
    response = daemon.client.post("/v1/jobs", json={"operation": "run", "arguments": {"port": 80}})
    assert response.status_code == 400
    assert response.json() == {"error": "argument recipe is required for operation run"}


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"operation": "sleep", "arguments": [1]}, "arguments must be a JSON object, not list"),
        (["sleep"], "the body must be a JSON object with operation and arguments"),
    ],
)
def test_a_body_of_the_wrong_shape_is_400(daemon, payload, message):
    response = daemon.client.post("/v1/jobs", json=payload)
    assert response.status_code == 400
    assert response.json() == {"error": message}


def _body_of_size(size: int) -> bytes:
    head = b'{"operation": "burst", "arguments": {"count": 1}, "padding": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


def test_an_oversized_body_is_413(daemon):
    response = daemon.client.post("/v1/jobs", content=_body_of_size(64 * 1024 + 1))
    assert response.status_code == 413
    assert response.json() == {"error": "the body is too large (bytes=65537, limit=65536)"}
    # A chunked body declares no length; it is measured as it arrives.
    chunks = iter([b"x" * 40_000, b"x" * 40_000])
    response = daemon.client.post("/v1/jobs", content=chunks)
    assert response.status_code == 413
    measured = re.fullmatch(r"the body is too large \(bytes=(\d+), limit=65536\)", response.json()["error"])
    assert measured and 65536 < int(measured[1]) <= 80000
    # Exactly at the limit is fine.
    assert daemon.client.post("/v1/jobs", content=_body_of_size(64 * 1024)).status_code == 202
    # Prompt answers have the same limit.
    answer = daemon.client.post(f"/v1/jobs/{UNKNOWN_JOB}/prompts/abc", content=_body_of_size(70_000))
    assert answer.status_code == 413
    assert answer.json() == {"error": "the body is too large (bytes=70000, limit=65536)"}


@pytest.mark.parametrize(
    "body, message",
    [
        (b"{nope", "the body is not JSON (Expecting property name enclosed in double quotes at column 2)"),
        (b"operation=sleep", "the body is not JSON (Expecting value at column 1)"),
    ],
)
def test_a_body_that_is_not_json_is_400(daemon, body, message):
    response = daemon.client.post("/v1/jobs", content=body)
    assert response.status_code == 400
    assert response.json() == {"error": message}


def test_a_body_that_is_not_utf8_is_400(daemon):
    response = daemon.client.post("/v1/jobs", content=b'{"operation": "\xff"}')
    assert response.status_code == 400
    assert "error" in response.json()


@pytest.mark.parametrize("limit", ["0", "x", "10001"])
def test_a_bad_job_list_limit_is_400(daemon, limit):
    response = daemon.client.get("/v1/jobs", params={"limit": limit})
    assert response.status_code == 400
    assert response.json() == {"error": f"limit must be an integer from 1 to 10000 (limit={limit!r})"}


# -- 3. the event stream --------------------------------------------------------------------


@pytest.mark.parametrize(
    "params, headers, shown",
    [
        ({"after": "-1"}, {}, "'-1'"),
        ({"after": "abc"}, {}, "'abc'"),
        ({"after": "1.5"}, {}, "'1.5'"),
        ({}, {"Last-Event-ID": "x"}, "'x'"),
        ({}, {"Last-Event-ID": "-3"}, "'-3'"),
        ({"after": "²"}, {}, "'²'"),
        ({"after": "١٢"}, {}, "'١٢'"),
        ({"after": str(2**63)}, {}, f"'{2**63}'"),
    ],
)
def test_a_negative_or_non_numeric_cursor_is_400(daemon, params, headers, shown):
    job = daemon.submit("burst", count=3)
    daemon.wait_state(job["job_id"])
    response = daemon.client.get(f"/v1/jobs/{job['job_id']}/events", params=params, headers=headers)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": f"the cursor must be a non-negative integer (after={shown})"}


def test_a_bad_follow_flag_is_400(daemon):
    job = daemon.submit("burst", count=3)
    response = daemon.client.get(f"/v1/jobs/{job['job_id']}/events", params={"follow": "maybe"})
    assert response.status_code == 400
    assert response.json() == {"error": "follow must be true or false (follow='maybe')"}


def test_sse_ids_are_the_journal_sequences(daemon):
    job_id = daemon.submit("burst", count=50)["job_id"]
    job = daemon.wait_state(job_id)
    assert (job["state"], job["first_retained"], job["last_seq"]) == ("succeeded", 1, 50)
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"follow": "false"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        events = list(parse_sse(response.iter_lines()))
    stored = _journal_rows(daemon, job_id)
    assert [(event.seq, event.data) for event in _messages(events)] == stored
    assert [seq for seq, _ in stored] == list(range(1, 51))
    assert [body["current"] for _, body in stored] == list(range(50))
    assert {body["operation_id"] for _, body in stored} == {job["operation_id"]}
    assert events[-1] == StreamEvent("end", {"state": "succeeded", "last_seq": 50}, None)


@pytest.mark.parametrize("how", ["after", "last-event-id"])
def test_replay_after_a_cursor_returns_exactly_the_later_events(daemon, how):
    job_id = daemon.submit("burst", count=50)["job_id"]
    daemon.wait_state(job_id)
    everything = _messages(daemon.replay(job_id))

    def replay(cursor: int) -> list[StreamEvent]:
        if how == "after":
            return daemon.replay(job_id, after=cursor)
        url = f"/v1/jobs/{job_id}/events"
        headers = {"Last-Event-ID": str(cursor)}
        with daemon.client.stream("GET", url, params={"follow": "false"}, headers=headers) as response:
            assert response.status_code == 200
            return list(parse_sse(response.iter_lines()))

    for cursor in (0, 1, 20, 49):
        events = replay(cursor)
        assert [event.seq for event in _messages(events)] == list(range(cursor + 1, 51))
        assert _messages(events) == everything[cursor:]
        assert events[-1] == StreamEvent("end", {"state": "succeeded", "last_seq": 50}, None)
    for cursor in (50, 500):  # at or past the end: nothing but the end
        assert replay(cursor) == [StreamEvent("end", {"state": "succeeded", "last_seq": 50}, None)]


def test_follow_false_replays_and_closes_while_the_job_still_runs(daemon):
    job_id = daemon.submit("sleep", seconds=60)["job_id"]
    _running_with_events(daemon, job_id, count=3)
    events = daemon.replay(job_id)
    assert events and all(event.name == "message" for event in events)  # no end: the job is not over
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert daemon.job(job_id)["state"] == "running"
    assert daemon.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


def test_an_end_event_arrives_once_the_job_is_terminal(daemon):
    job_id = daemon.submit("sleep", seconds=0.5)["job_id"]
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=30) as response:
        assert response.status_code == 200
        events = list(parse_sse(response.iter_lines()))  # ends because the server closes the stream
    job = daemon.job(job_id)
    assert job["state"] == "succeeded" and job["result"] == {"slept": 0.5}
    *messages, end = events
    assert all(event.name == "message" for event in messages)
    assert [event.seq for event in messages] == list(range(1, job["last_seq"] + 1))
    assert end == StreamEvent("end", {"state": "succeeded", "last_seq": job["last_seq"]}, None)


def test_events_are_pushed_while_the_job_runs(daemon):
    job_id = daemon.submit("sleep", seconds=60)["job_id"]
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=30) as response:
        assert response.status_code == 200
        events = parse_sse(response.iter_lines())
        first = next(events)
        assert first.name == "message" and first.seq == 1 and first.data["message"] == "sleeping"
        assert daemon.job(job_id)["state"] == "running"  # delivered live, long before the job ends
        second = next(events)
        assert second.seq == 2 and daemon.job(job_id)["state"] == "running"
        assert daemon.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
        rest = list(events)
    assert rest[-1].name == "end" and rest[-1].data["state"] == "cancelled"
    assert [event.seq for event in _messages([first, second, *rest])] == list(range(1, rest[-1].data["last_seq"] + 1))


def test_an_idle_stream_gets_comment_keepalives(start_daemon):
    daemon = start_daemon(args=("--keepalive", "0.2"))
    job_id = daemon.submit("ask")["job_id"]
    daemon.wait_state(job_id, "waiting_input")
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=30) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        assert [next(lines), next(lines)] == [": keepalive", ""]
    assert daemon.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


# -- 4. expired cursors ---------------------------------------------------------------------


def test_an_expired_cursor_is_410_with_first_retained_before_any_stream_headers(start_daemon):
    daemon = start_daemon(args=("--max-events", "20"))
    job_id = daemon.submit("burst", count=200)["job_id"]
    job = daemon.wait_state(job_id)
    assert (job["state"], job["first_retained"], job["last_seq"]) == ("succeeded", 181, 200)
    for params, headers in (({"after": 5}, {}), ({}, {"Last-Event-ID": "5"})):
        with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params=params, headers=headers) as response:
            assert response.status_code == 410
            assert response.headers["content-type"] == "application/json"
            body = json.loads(response.read())
        assert body == {"error": "the cursor has expired", "first_retained": 181, "after": 5}
    client = DaemonClient(daemon.url, daemon.token)
    try:
        with pytest.raises(DaemonError) as caught:
            next(client.events(job_id, after=5))
    finally:
        client.close()
    assert str(caught.value) == "the cursor has expired (status=410, first_retained=181)"
    expired = daemon.client.get(f"/v1/jobs/{job_id}/events", params={"after": 179})
    assert expired.status_code == 410 and expired.json()["first_retained"] == 181
    # Resuming just before the first retained event replays what is left.
    events = daemon.replay(job_id, after=180)
    assert [event.seq for event in _messages(events)] == list(range(181, 201))
    assert [event.data["current"] for event in _messages(events)] == list(range(180, 200))
    assert [seq for seq, _ in _journal_rows(daemon, job_id)] == list(range(181, 201))


def test_a_stream_trimmed_under_its_reader_gets_an_in_band_gap_event(start_daemon):
    daemon = start_daemon(args=("--max-events", "5"))
    job_id = daemon.submit("burst", count=2000)["job_id"]
    received: list[StreamEvent] = []
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"after": 0}, timeout=60) as response:
        assert response.status_code == 200
        for event in parse_sse(response.iter_lines()):
            received.append(event)
            if len(received) % 10 == 0:
                threading.Event().wait(0.005)  # a slow reader
    assert received[-1] == StreamEvent("end", {"state": "succeeded", "last_seq": 2000}, None)
    last = 0
    pending_gap: dict | None = None
    for event in received[:-1]:
        if event.name == "gap":
            assert event.data["after"] == last and event.data["first_retained"] > last + 1
            pending_gap = event.data
            continue
        assert event.name == "message"
        if event.seq != last + 1:  # a hole in the sequence is always announced by a gap event
            assert pending_gap is not None and event.seq == pending_gap["first_retained"], (last, event.seq)
        assert event.seq > last and event.data["current"] == event.seq - 1
        last, pending_gap = event.seq, None
    assert last == 2000
    gaps = [event for event in received if event.name == "gap"]
    contiguous = [event.seq for event in _messages(received)] == list(range(1, 2001))
    assert gaps or contiguous


def test_the_journal_keeps_at_most_max_event_bytes_per_job(start_daemon):
    daemon = start_daemon(args=("--max-event-bytes", "1024"))
    job_id = daemon.submit("burst", count=50)["job_id"]
    job = daemon.wait_state(job_id)
    assert job["state"] == "succeeded" and job["last_seq"] == 50
    db = sqlite3.connect(f"file:{daemon.state_dir / 'daemon' / 'journal.sqlite3'}?mode=ro", uri=True, timeout=5)
    try:
        sizes = db.execute(
            "SELECT seq, length(CAST(body AS BLOB)) FROM events WHERE job_id = ? ORDER BY seq", (job_id,)
        ).fetchall()
    finally:
        db.close()
    assert [seq for seq, _ in sizes] == list(range(job["first_retained"], 51))
    assert job["first_retained"] > 1 and sum(size for _, size in sizes) <= 1024
    assert sum(size for _, size in sizes) + sizes[0][1] > 1024  # one more (alike) event would not fit
    expired = daemon.client.get(f"/v1/jobs/{job_id}/events", params={"after": 0})
    assert expired.status_code == 410 and expired.json()["first_retained"] == job["first_retained"]


# -- 5. subscribers --------------------------------------------------------------------------


def test_a_client_that_disconnects_mid_stream_frees_its_slot_and_harms_nothing(start_daemon):
    daemon = start_daemon(args=("--max-streams", "1"))
    job_id = daemon.submit("sleep", seconds=60)["job_id"]
    with contextlib.ExitStack() as stack:
        events = _open_stream(daemon, stack, job_id)
        assert next(events).name == "message"
        busy = daemon.client.get(f"/v1/jobs/{job_id}/events")
        assert busy.status_code == 429
    # The first stream is closed mid-way; its slot comes back.
    assert daemon.process.poll() is None
    assert daemon.client.get("/v1/health").status_code == 200
    assert daemon.job(job_id)["state"] == "running"

    def stream_again() -> bool:
        with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"after": 0}) as response:
            if response.status_code == 429:
                return False
            assert response.status_code == 200
            return next(parse_sse(response.iter_lines())).seq == 1

    wait_for(stream_again, timeout=15, interval=0.1, what="the disconnected client's stream slot to be freed")
    assert daemon.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200
    assert daemon.wait_state(job_id)["state"] == "cancelled"
    assert daemon.submit("burst", count=3) and daemon.process.poll() is None
    assert "Traceback" not in daemon.output()


def test_more_subscribers_than_allowed_get_429(start_daemon):
    daemon = start_daemon(args=("--max-streams", "2"))
    job_id = daemon.submit("sleep", seconds=60)["job_id"]
    with contextlib.ExitStack() as stack:
        # Keep both readers referenced: a collected reader closes its connection.
        first, second = _open_stream(daemon, stack, job_id), _open_stream(daemon, stack, job_id)
        refused = daemon.client.get(f"/v1/jobs/{job_id}/events")
        assert refused.status_code == 429
        assert refused.json() == {"error": "too many event streams (limit=2)", "retry_after": 1}
        assert refused.headers["retry-after"] == "1"
        assert daemon.client.get(f"/v1/jobs/{job_id}").status_code == 200  # only streams are limited
        assert next(first).name == next(second).name == "message"  # the admitted streams go on
    assert daemon.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


# -- 6. one daemon per state directory ------------------------------------------------------


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
    assert json.loads(daemon.info_path.read_text()) == {"url": daemon.url, "pid": daemon.process.pid}
    assert daemon.token_path.read_text().strip() == daemon.token
    assert daemon.client.get("/v1/jobs").status_code == 200
    started = daemon.run_cli("daemon", "start", "--port", "0")
    assert started.returncode == 1
    assert started.stderr.startswith(
        f"error: a daemon already runs for this state directory (state_dir={daemon.state_dir})"
    )


# -- 7. kill -9 and restart -----------------------------------------------------------------


def test_kill_9_mid_job_then_restart_marks_the_job_lost_and_keeps_its_events(daemon):
    job_id = daemon.submit("sleep", seconds=120)["job_id"]
    job = _running_with_events(daemon, job_id, count=5)
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
    messages = _messages(events)
    assert len(messages) >= seen and len(messages) == job["last_seq"]
    assert [event.seq for event in messages] == list(range(1, job["last_seq"] + 1))
    assert all(event.data["message"] == "sleeping" for event in messages)
    assert events[-1] == StreamEvent("end", {"state": "lost", "last_seq": job["last_seq"]}, None)
    cancel = daemon.client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancel.status_code == 409
    # New jobs work, with their own sequences.
    fresh = daemon.submit("burst", count=10)["job_id"]
    assert daemon.wait_state(fresh)["state"] == "succeeded"
    assert [event.seq for event in _messages(daemon.replay(fresh))] == list(range(1, 11))


# -- 8. cancellation ------------------------------------------------------------------------


def test_cancel_of_a_running_job_ends_its_worker(daemon):
    job_id = daemon.submit("sleep", seconds=120)["job_id"]
    worker = _running_with_events(daemon, job_id)["worker_pid"]
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
    _running_with_events(daemon, running)
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


# -- 9. prompts and secrets -----------------------------------------------------------------


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
    stored = [body for _, body in _journal_rows(daemon, job_id)]
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


# -- 10. legacy logging ---------------------------------------------------------------------


def test_plain_logging_from_a_context_free_thread_reaches_the_journal(daemon):
    job_id = daemon.submit("legacy")["job_id"]
    job = daemon.wait_state(job_id)
    assert job["state"] == "succeeded" and job["result"] == {"ok": True}
    logs = [event.data for event in _messages(daemon.replay(job_id)) if event.data["type"] == "log"]
    assert [(log["level"], log["message"], log["source"]) for log in logs] == [
        ("progress", "progress from a plain thread", "test.legacy"),
        ("warning", "warning from a plain thread", "test.legacy"),
    ]
    assert {log["operation_id"] for log in logs} == {job["operation_id"]}


# -- 11. concurrency ------------------------------------------------------------------------


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
            messages = _messages(events)
            assert [event.seq for event in messages] == list(range(1, 501))
            assert [event.data["current"] for event in messages] == list(range(500))
            assert {event.data["operation_id"] for event in messages} == {job["operation_id"]}
            assert events[-1] == StreamEvent("end", {"state": "succeeded", "last_seq": 500}, None)


# -- 12. failing jobs and the launch pipeline -----------------------------------------------


@pytest.mark.parametrize("arguments, message", [({}, "planned failure"), ({"message": "boom"}, "boom")])
def test_a_failing_job_is_failed_with_its_error(daemon, arguments, message):
    job_id = daemon.submit("fail", **arguments)["job_id"]
    job = daemon.wait_state(job_id)
    assert job["state"] == "failed"
    assert job["error"] == {"type": "RuntimeError", "message": message}
    assert job["result"] is None
    assert daemon.replay(job_id)[-1] == StreamEvent("end", {"state": "failed", "last_seq": job["last_seq"]}, None)


def _run_example(daemon: DaemonProcess) -> dict[str, Any]:
    job_id = daemon.submit("run", recipe=str(EXAMPLE_RECIPE))["job_id"]
    job = daemon.wait_state(job_id, timeout=90)
    assert job["state"] == "succeeded", job
    return job


def test_run_and_stop_of_the_example_recipe_through_the_daemon(daemon):
    job = _run_example(daemon)
    result = job["result"]
    assert (result["name"], result["state"], result["operation_id"]) == ("example-chat", "running", job["operation_id"])
    (pid,) = result["pids"]
    assert process_alive(pid)
    body = {"model": "tiny-echo", "messages": [{"role": "user", "content": "hello there"}]}
    reply = httpx.post(f"{result['url']}/v1/chat/completions", json=body, timeout=10)
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
    phases = [
        (event.data["slug"], event.data["status"])
        for event in _messages(daemon.replay(job["job_id"]))
        if event.data["type"] == "progress" and "slug" in event.data and "step" not in event.data
    ]
    assert ("runtime", "succeeded") in phases and phases[-1] == ("post_launch", "succeeded")

    status = daemon.wait_state(daemon.submit("status")["job_id"])
    assert [(item["name"], item["state"], item["pids"]) for item in status["result"]] == [
        ("example-chat", "running", [pid])
    ]
    stopped = daemon.wait_state(daemon.submit("stop", name="example-chat")["job_id"])
    assert stopped["state"] == "succeeded", stopped
    assert stopped["result"] == [{"name": "example-chat", "outcome": "terminated"}]
    wait_for(lambda: not process_alive(pid), timeout=15, what="the workload to exit")
    again = daemon.wait_state(daemon.submit("stop", name="example-chat")["job_id"])
    assert again["state"] == "failed" and again["error"]["type"] == "DeploymentError"


# -- 13. the CLI ----------------------------------------------------------------------------


def test_cli_call_wait_prints_the_result(daemon):
    completed = daemon.run_cli("daemon", "call", "sleep", "--arg", "seconds=0.2", "--wait")
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == {"slept": 0.2}
    (job,) = daemon.client.get("/v1/jobs").json()["jobs"]
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
    assert completed.stdout == f"daemon at {daemon.url}: failed 1, succeeded 1\n"


def test_cli_status_without_a_daemon_exits_1(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "sparkrun", "daemon", "status", "--state-dir", str(tmp_path / "state")],
        cwd=ROOT,
        env=daemon_environment(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 1
    assert completed.stderr.startswith("error: no daemon runs for this state directory")


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


# -- 14. the workload log stream ------------------------------------------------------------


def test_the_log_stream_tails_a_deployments_log(daemon):
    result = _run_example(daemon)["result"]
    params = {"name": "example-chat", "tail": 2, "follow": "false"}
    expected = Path(result["log_path"]).read_text().splitlines()[-2:]
    with daemon.client.stream("GET", "/v1/streams/logs", params=params) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = list(parse_sse(response.iter_lines()))
    assert events == [
        StreamEvent("message", expected[0], None),
        StreamEvent("message", expected[1], None),
        StreamEvent("end", {"deployment": "example-chat"}, None),
    ]
    everything = daemon.client.get("/v1/streams/logs", params={"name": "example-chat", "follow": "false"})
    assert everything.status_code == 200
    lines = [event.data for event in parse_sse(iter(everything.text.splitlines())) if event.name == "message"]
    assert lines == Path(result["log_path"]).read_text().splitlines()
    assert any(line.startswith("serving tiny-echo on ") for line in lines)


def test_the_log_stream_of_an_unknown_deployment_is_404(daemon):
    response = daemon.client.get("/v1/streams/logs", params={"name": "nope", "follow": "false"})
    assert response.status_code == 404
    assert response.json() == {"error": "no deployment with this name (deployment='nope')"}


@pytest.mark.parametrize("tail", ["-1", "x", "²", str(2**63)])
def test_a_bad_log_tail_is_400(daemon, tail):
    response = daemon.client.get("/v1/streams/logs", params={"name": "nope", "tail": tail, "follow": "false"})
    assert response.status_code == 400
    assert response.json() == {"error": f"tail must be a non-negative integer (tail={tail[:20]!r})"}


def test_idle_log_followers_do_not_starve_other_log_requests(daemon):
    _run_example(daemon)
    pool = min(32, (os.cpu_count() or 1) + 4)  # asyncio's default executor size
    followers: list[tuple[httpx.Client, httpx.Response]] = []
    try:
        for _ in range(pool + 2):
            client = httpx.Client(base_url=daemon.url, headers=daemon.auth, timeout=30)
            request = client.build_request("GET", "/v1/streams/logs", params={"name": "example-chat", "tail": 0})
            followers.append((client, client.send(request, stream=True)))
        assert all(response.status_code == 200 for _, response in followers)
        threading.Event().wait(1.0)  # let every follower's handler reach its wait for new lines
        params = {"name": "example-chat", "tail": 2, "follow": "false"}
        response = httpx.get(f"{daemon.url}/v1/streams/logs", params=params, headers=daemon.auth, timeout=10)
        assert response.status_code == 200
        assert response.text.endswith('event: end\ndata: {"deployment": "example-chat"}\n\n')
    finally:
        for client, response in followers:
            response.close()
            client.close()
        # Ending the workload ends any follower still waiting, so the daemon can exit.
        daemon.wait_state(daemon.submit("stop", name="example-chat")["job_id"])


# -- shutdown ---------------------------------------------------------------------------------


def test_sigterm_ends_running_jobs_as_cancelled_and_removes_daemon_json(daemon):
    job_id = daemon.submit("sleep", seconds=120)["job_id"]
    worker = _running_with_events(daemon, job_id)["worker_pid"]
    daemon.process.send_signal(signal.SIGTERM)
    daemon.process.wait(timeout=30)
    wait_for(lambda: not group_alive(worker), timeout=15, what=f"worker group {worker} to be gone")
    assert not daemon.info_path.exists()
    daemon.start()
    job = daemon.job(job_id)
    assert job["state"] == "cancelled", job  # "its running jobs end as cancelled", not lost


def test_cli_start_status_stop_and_start_again(tmp_path):
    daemon = DaemonProcess(tmp_path / "background")  # not started here: the CLI starts it
    try:
        for _ in range(2):
            started = daemon.run_cli("daemon", "start", "--port", "0")
            assert started.returncode == 0, started.stderr
            info = json.loads(daemon.info_path.read_text())
            assert started.stdout == f"daemon started at {info['url']} (pid {info['pid']})\n"
            status = daemon.run_cli("daemon", "status")
            assert status.stdout == f"daemon at {info['url']}: no jobs\n"
            stopped = daemon.run_cli("daemon", "stop")
            assert stopped.returncode == 0 and stopped.stdout == f"daemon stopped (pid {info['pid']})\n"
            wait_for(lambda: not process_alive(info["pid"]), timeout=15, what="the daemon to exit")  # noqa: B023
            assert not daemon.info_path.exists()
        again = daemon.run_cli("daemon", "stop")
        assert again.returncode == 1
        assert again.stderr == f"error: no daemon runs for this state directory (state_dir={daemon.state_dir})\n"
    finally:
        _kill_background_daemon(daemon)


def _kill_background_daemon(daemon: DaemonProcess) -> None:
    with contextlib.suppress(OSError, ValueError, KeyError):
        pid = json.loads(daemon.info_path.read_text())["pid"]
        if process_alive(pid) and b"sparkrun" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    daemon.stop()


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


def _status_line(sock: socket.socket) -> str:
    data = b""
    while b"\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            break
        data += chunk
    return data.split(b"\r\n", 1)[0].decode()


def test_subscribers_arriving_together_beyond_the_limit_get_429(start_daemon):
    daemon = start_daemon(args=("--max-streams", "2"))
    job_id = daemon.submit("sleep", seconds=120)["job_id"]
    _running_with_events(daemon, job_id)
    host, port = daemon.url.removeprefix("http://").rsplit(":", 1)
    request = (
        f"GET /v1/jobs/{job_id}/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {daemon.token}\r\n\r\n"
    ).encode()
    for _ in range(10):
        sockets = [socket.create_connection((host, int(port)), timeout=10) for _ in range(30)]
        try:
            for sock in sockets:  # back to back, so the daemon reads them in one go
                sock.sendall(request)
            statuses = [_status_line(sock) for sock in sockets]
        finally:
            for sock in sockets:
                sock.close()
        admitted = sum(" 200 " in status for status in statuses)
        assert admitted <= 2, f"{admitted} streams admitted with max_streams=2"

        def one_slot_free() -> bool:
            with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"follow": "false"}) as response:
                return response.status_code == 200

        wait_for(one_slot_free, timeout=15, what="the closed streams to release their slots")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_in_the_body_are_rejected(daemon, constant):
    body = f'{{"operation": "sleep", "arguments": {{"seconds": {constant}}}}}'.encode()
    response = daemon.client.post("/v1/jobs", content=body)
    listing = daemon.client.get("/v1/jobs")
    assert listing.status_code == 200, listing.text  # one bad job must not break the listing
    assert response.status_code == 400


def test_a_deeply_nested_body_is_400(daemon):
    response = httpx.post(
        f"{daemon.url}/v1/jobs", headers=daemon.auth, content=b"[" * 30_000 + b"]" * 30_000, timeout=30
    )
    assert response.status_code == 400


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
