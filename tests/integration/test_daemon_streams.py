"""The sparkrun daemon as a real process: SSE cursors, replay, gap and end events, subscribers, log streams.

Every test starts its own ``sparkrun daemon serve`` (see :mod:`tests.integration.daemon_harness`)
with the test operations of :mod:`tests.integration.daemon_plugins`, and stops it, its
workers and any deployment afterwards. The cursor rules themselves (cursors within range, 410,
the gap of a stream without a cursor, malformed cursors, unknown jobs) are checked in process,
in milliseconds, by ``tests/unit/test_daemon_cursors.py``; these tests keep what needs a real
daemon: events a worker journals, live pushes, keepalives, trimming under a reader's feet.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun.daemon.client import DaemonClient, StreamEvent, parse_sse
from sparkrun.errors import DaemonError
from tests.integration.daemon_harness import (
    DaemonProcess,
    journal_rows,
    message_events,
    run_example,
    running_with_events,
    wait_for,
)

pytestmark = pytest.mark.integration


def _open_stream(daemon: DaemonProcess, stack: contextlib.ExitStack, job_id: str, **params: Any) -> Any:
    """A following stream of ``job_id`` that has delivered its first event (so its subscriber is counted)."""
    response = stack.enter_context(
        daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"after": 0, **params}, timeout=30)
    )
    assert response.status_code == 200, response.read().decode()
    events = parse_sse(response.iter_lines())
    assert next(events).name == "message"
    return events


# -- the event stream -----------------------------------------------------------------------


def test_sse_ids_are_the_journal_sequences(daemon):
    job_id = daemon.submit("burst", count=50)["job_id"]
    job = daemon.wait_state(job_id)
    assert (job["state"], job["first_retained"], job["last_seq"]) == ("succeeded", 1, 50)
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", params={"follow": "false"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        events = list(parse_sse(response.iter_lines()))
    stored = journal_rows(daemon, job_id)
    assert [(event.seq, event.data) for event in message_events(events)] == stored
    assert [seq for seq, _ in stored] == list(range(1, 51))
    assert [body["current"] for _, body in stored] == list(range(50))
    assert {body["operation_id"] for _, body in stored} == {job["operation_id"]}
    assert events[-1] == StreamEvent("end", {"state": "succeeded", "last_seq": 50}, None)


def test_follow_false_replays_and_closes_while_the_job_still_runs(daemon):
    job_id = daemon.submit("sleep", seconds=60)["job_id"]
    running_with_events(daemon, job_id, count=3)
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
    assert [event.seq for event in message_events([first, second, *rest])] == list(
        range(1, rest[-1].data["last_seq"] + 1)
    )


def test_an_idle_stream_gets_comment_keepalives(start_daemon):
    daemon = start_daemon(args=("--keepalive", "0.2"))
    job_id = daemon.submit("ask")["job_id"]
    daemon.wait_state(job_id, "waiting_input")
    with daemon.client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=30) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        assert [next(lines), next(lines)] == [": keepalive", ""]
    assert daemon.client.post(f"/v1/jobs/{job_id}/cancel").status_code == 200


# -- expired cursors ------------------------------------------------------------------------


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
    assert [event.seq for event in message_events(events)] == list(range(181, 201))
    assert [event.data["current"] for event in message_events(events)] == list(range(180, 200))
    assert [seq for seq, _ in journal_rows(daemon, job_id)] == list(range(181, 201))


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
    contiguous = [event.seq for event in message_events(received)] == list(range(1, 2001))
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


# -- subscribers -----------------------------------------------------------------------------


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


# -- the workload log stream ----------------------------------------------------------------


def test_the_log_stream_tails_a_deployments_log(daemon):
    result = run_example(daemon)["result"]
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


@pytest.mark.parametrize("tail", ["-1", "x", "²", str(2**63), "100001"])
def test_a_bad_log_tail_is_400(daemon, tail):
    response = daemon.client.get("/v1/streams/logs", params={"name": "nope", "tail": tail, "follow": "false"})
    assert response.status_code == 400
    assert response.json() == {"error": f"tail must be an integer from 0 to 100000 (tail={tail[:20]!r})"}


def test_idle_log_followers_do_not_starve_other_log_requests(daemon):
    run_example(daemon)
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


# -- regressions: bugs these tests found ---------------------------------------------------


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
    running_with_events(daemon, job_id)
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
