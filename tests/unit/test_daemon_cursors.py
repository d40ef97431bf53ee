"""The event stream's cursor, 410 and gap rules, in process: the daemon's app over a temporary journal.

Jobs and their events are written straight into the journal (which keeps 5 events per job), and
``GET /v1/jobs/{id}/events`` is read through ``httpx.ASGITransport``, so each case costs milliseconds.
``tests/integration/test_daemon_streams.py`` keeps the cases that need a real daemon: events a
worker journals, live pushes, keepalives, and trimming under a reader's feet.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from sparkrun.daemon.app import DaemonSettings, create_app
from sparkrun.daemon.client import StreamEvent, parse_sse
from sparkrun.daemon.jobs import JobManager
from sparkrun.daemon.journal import Journal

pytestmark = pytest.mark.anyio

TOKEN = "0123456789abcdef0123456789abcdef"
MAX_EVENTS = 5
UNKNOWN_JOB = "0" * 32


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the daemon runs on asyncio (uvicorn)


@pytest.fixture
def journal(tmp_path) -> Any:
    journal = Journal(tmp_path / "j.sqlite3", max_events=MAX_EVENTS)
    yield journal
    journal.close()


@pytest.fixture
async def client(journal, tmp_path) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(JobManager(journal, tmp_path), DaemonSettings(token=TOKEN))
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://test", headers=headers) as client:
        yield client


def _job(journal: Journal, count: int, state: str = "succeeded") -> str:
    """A job that journaled ``count`` events ``{"current": seq - 1}`` and is now in ``state``."""
    job_id = uuid.uuid4().hex
    journal.create_job(job_id, "burst", {"count": count}, uuid.uuid4().hex)
    if count:
        journal.append_many(job_id, [{"current": index} for index in range(count)])
    if state != "queued":
        finished = {"finished_at": time.time()} if state != "running" else {}
        journal.update_job(job_id, state=state, started_at=time.time(), **finished)
    return job_id


def _get(client: httpx.AsyncClient, job_id: str, headers: dict[str, str] | None = None, **params: Any) -> Any:
    return client.get(f"/v1/jobs/{job_id}/events", params={"follow": "false", **params}, headers=headers or {})


async def _events(client: httpx.AsyncClient, job_id: str, **options: Any) -> list[StreamEvent]:
    response = await _get(client, job_id, **options)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return list(parse_sse(iter(response.text.splitlines())))


def _messages(*seqs: int) -> list[StreamEvent]:
    """The stream's events for journal sequences ``seqs`` (each event is ``{"current": seq - 1}``)."""
    return [StreamEvent("message", {"current": seq - 1}, seq) for seq in seqs]


def _end(state: str, last_seq: int) -> StreamEvent:
    return StreamEvent("end", {"state": state, "last_seq": last_seq}, None)


# -- cursors within range ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (7, [8, 9, 10, 11, 12]),  # just before the first retained event: everything retained
        (9, [10, 11, 12]),
        (11, [12]),
        (12, []),  # at the end: nothing but the end
        (500, []),  # past the end, likewise
    ],
)
async def test_a_cursor_within_range_replays_exactly_the_later_events(client, journal, after, expected):
    job_id = _job(journal, 12)  # keeps 8 to 12
    assert await _events(client, job_id, after=after) == [*_messages(*expected), _end("succeeded", 12)]


async def test_sse_ids_are_the_journal_sequences_and_data_the_stored_bodies(client, journal):
    job_id = _job(journal, 12)
    stored = journal.read(job_id, after=7)
    assert [seq for seq, _ in stored] == [8, 9, 10, 11, 12]
    response = await _get(client, job_id, after=7)
    replayed = "".join(f"id: {seq}\ndata: {text}\n\n" for seq, text in stored)
    assert response.text == replayed + 'event: end\ndata: {"state": "succeeded", "last_seq": 12}\n\n'


async def test_cursor_zero_on_an_untrimmed_job_replays_everything_without_a_gap(client, journal):
    job_id = _job(journal, 3)
    assert await _events(client, job_id, after=0) == [*_messages(1, 2, 3), _end("succeeded", 3)]


async def test_last_event_id_is_a_cursor_and_wins_over_after(client, journal):
    job_id = _job(journal, 12)
    expected = [*_messages(11, 12), _end("succeeded", 12)]
    assert await _events(client, job_id, headers={"Last-Event-ID": "10"}) == expected
    # A reconnecting EventSource sends Last-Event-ID with its original URL: the header is the newer position.
    assert await _events(client, job_id, headers={"Last-Event-ID": "10"}, after=0) == expected


async def test_follow_false_on_a_running_job_closes_without_an_end(client, journal):
    job_id = _job(journal, 3, state="running")
    assert await _events(client, job_id, after=0) == _messages(1, 2, 3)


@pytest.mark.parametrize("state", ["failed", "cancelled", "lost"])
async def test_the_end_event_names_the_terminal_state(client, journal, state):
    job_id = _job(journal, 2, state=state)
    assert await _events(client, job_id, after=1) == [*_messages(2), _end(state, 2)]


# -- expired cursors: 410 --------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["running", "succeeded"])  # counters in memory, and read back from SQLite
@pytest.mark.parametrize(("after", "header"), [(0, False), (6, False), (0, True), (6, True)])
async def test_an_expired_cursor_is_410_with_first_retained(client, journal, state, after, header):
    job_id = _job(journal, 12, state=state)  # keeps 8 to 12: a cursor below 7 missed events
    options = {"headers": {"Last-Event-ID": str(after)}} if header else {"after": after}
    response = await _get(client, job_id, **options)
    assert response.status_code == 410
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": "the cursor has expired", "first_retained": 8, "after": after}


# -- no cursor: from the oldest retained event -----------------------------------------------------


async def test_no_cursor_on_an_untrimmed_job_replays_everything_without_a_gap(client, journal):
    job_id = _job(journal, 3)
    assert await _events(client, job_id) == [*_messages(1, 2, 3), _end("succeeded", 3)]


async def test_no_cursor_on_a_job_without_events_is_just_the_end(client, journal):
    job_id = _job(journal, 0)
    assert await _events(client, job_id) == [_end("succeeded", 0)]


@pytest.mark.parametrize(("state", "end"), [("succeeded", [_end("succeeded", 12)]), ("running", [])])
async def test_no_cursor_on_a_trimmed_job_is_200_with_a_gap_first(client, journal, state, end):
    job_id = _job(journal, 12, state=state)
    events = await _events(client, job_id)
    assert events == [StreamEvent("gap", {"after": 0, "first_retained": 8}, None), *_messages(8, 9, 10, 11, 12), *end]
    response = await _get(client, job_id)
    assert response.text.startswith('event: gap\ndata: {"after": 0, "first_retained": 8}\n\nid: 8\n')


# -- bad requests ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "headers", "shown"),
    [
        ({"after": "-1"}, {}, "'-1'"),
        ({"after": "abc"}, {}, "'abc'"),
        ({"after": "1.5"}, {}, "'1.5'"),
        ({"after": ""}, {}, "''"),
        ({}, {"Last-Event-ID": "x"}, "'x'"),
        ({}, {"Last-Event-ID": "-3"}, "'-3'"),
        ({"after": "²"}, {}, "'²'"),
        ({"after": "١٢"}, {}, "'١٢'"),
        ({"after": str(2**63)}, {}, f"'{2**63}'"),
    ],
)
async def test_a_negative_or_non_numeric_cursor_is_400(client, journal, params, headers, shown):
    job_id = _job(journal, 3)
    response = await _get(client, job_id, headers=headers, **params)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"error": f"the cursor must be a non-negative integer (after={shown})"}


async def test_a_bad_follow_flag_is_400(client, journal):
    job_id = _job(journal, 3)
    response = await client.get(f"/v1/jobs/{job_id}/events", params={"follow": "maybe"})
    assert response.status_code == 400
    assert response.json() == {"error": "follow must be true or false (follow='maybe')"}


@pytest.mark.parametrize("params", [{}, {"after": 0}, {"after": 5}], ids=["no-cursor", "after-0", "after-5"])
async def test_an_unknown_job_is_404(client, params):
    response = await _get(client, UNKNOWN_JOB, **params)
    assert response.status_code == 404
    assert response.json() == {"error": f"unknown job (job_id={UNKNOWN_JOB})"}


async def test_a_malformed_job_id_is_400(client):
    response = await _get(client, "not-a-job")
    assert response.status_code == 400
    assert response.json() == {"error": "malformed job id (job_id='not-a-job', expected 32 lowercase hex characters)"}
