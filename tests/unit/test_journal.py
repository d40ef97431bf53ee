"""The job journal against a real SQLite file: sequences, bounds, cursors, durability, pruning."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from sparkrun.daemon.journal import STATES, TERMINAL_STATES, CursorExpired, JobRecord, Journal, UnknownJob
from sparkrun.errors import SparkrunError


@pytest.fixture
def journal(tmp_path):
    journal = Journal(tmp_path / "state" / "daemon" / "journal.db")
    yield journal
    journal.close()


def _bounded(tmp_path, **bounds) -> Journal:
    journal = Journal(tmp_path / "bounded.db", **bounds)
    journal.create_job("j1", "run", {}, "op-1")
    return journal


def _seqs(journal: Journal, job_id: str = "j1", after: int = 0) -> list[int]:
    return [seq for seq, _ in journal.read(job_id, after=after, limit=100_000)]


def test_states_constants():
    assert TERMINAL_STATES == ("succeeded", "failed", "cancelled", "lost")
    assert STATES == ("queued", "running", "waiting_input", "succeeded", "failed", "cancelled", "lost")


def test_creates_parent_directory_and_queued_job(journal, tmp_path):
    assert (tmp_path / "state" / "daemon" / "journal.db").exists()
    record = journal.create_job("j1", "run", {"recipe": "r"}, "op-1")
    assert record.state == "queued"
    assert record.arguments == {"recipe": "r"}
    assert (record.first_retained, record.last_seq) == (1, 0)
    assert record.started_at is None and record.result is None and record.worker_pid is None


def test_duplicate_job_id_is_rejected(journal):
    journal.create_job("j1", "run", {}, "op-1")
    with pytest.raises(ValueError, match="already exists"):
        journal.create_job("j1", "run", {}, "op-2")


def test_sequences_are_per_job_and_gapless(journal):
    journal.create_job("a", "run", {}, "op-a")
    journal.create_job("b", "run", {}, "op-b")
    assert journal.append("a", {"n": 1}) == 1
    assert journal.append("a", {"n": 2}) == 2
    assert journal.append("b", {"n": 1}) == 1
    assert journal.append_many("a", [{"n": 3}, {"n": 4}]) == [3, 4]
    assert journal.append_many("a", []) == []
    assert journal.read("a") == [(1, '{"n":1}'), (2, '{"n":2}'), (3, '{"n":3}'), (4, '{"n":4}')]
    record = journal.job("a")
    assert (record.first_retained, record.last_seq) == (1, 4)


def test_events_are_stored_as_compact_json(journal):
    journal.create_job("j1", "run", {}, "op-1")
    journal.append("j1", {"type": "progress", "data": {"a": [1, 2]}, "text": "ü"})
    assert journal.read("j1") == [(1, '{"type":"progress","data":{"a":[1,2]},"text":"\\u00fc"}')]


def test_count_bound_keeps_newest_events(tmp_path):
    journal = _bounded(tmp_path, max_events=5)
    for n in range(1, 13):
        journal.append("j1", {"n": n})
    assert _seqs(journal, after=7) == [8, 9, 10, 11, 12]
    record = journal.job("j1")
    assert (record.first_retained, record.last_seq) == (8, 12)
    assert journal.append_many("j1", [{"n": 13}, {"n": 14}, {"n": 15}]) == [13, 14, 15]
    assert _seqs(journal, after=10) == [11, 12, 13, 14, 15]
    journal.close()


def test_batch_larger_than_count_bound_keeps_its_tail(tmp_path):
    journal = _bounded(tmp_path, max_events=3)
    assert journal.append_many("j1", [{"n": n} for n in range(10)]) == list(range(1, 11))
    assert journal.read("j1", after=7) == [(8, '{"n":7}'), (9, '{"n":8}'), (10, '{"n":9}')]
    journal.close()


def test_byte_bound_keeps_newest_events(tmp_path):
    # Every body '{"p":"xxxxxxxxxx"}' is 18 bytes; 50 bytes hold two of them.
    journal = _bounded(tmp_path, max_event_bytes=50)
    for _ in range(6):
        journal.append("j1", {"p": "x" * 10})
    assert _seqs(journal, after=4) == [5, 6]
    journal.append("j1", {"p": ""})  # 8 bytes: 18 + 18 + 8 = 44 <= 50
    assert _seqs(journal, after=4) == [5, 6, 7]
    journal.append("j1", {"p": "x" * 10})  # 18 + 8 + 18 = 44 after dropping seq 5
    assert _seqs(journal, after=5) == [6, 7, 8]
    journal.close()


def test_oversized_event_is_kept_alone(tmp_path):
    journal = _bounded(tmp_path, max_event_bytes=50)
    journal.append_many("j1", [{"p": "a"}, {"p": "b"}])
    assert journal.append("j1", {"p": "x" * 100}) == 3
    assert _seqs(journal, after=2) == [3]
    assert journal.job("j1").first_retained == 3
    assert journal.append("j1", {"p": "c"}) == 4
    assert _seqs(journal, after=3) == [4]
    journal.close()


def test_read_after_and_limit(journal):
    journal.create_job("j1", "run", {}, "op-1")
    journal.append_many("j1", [{"n": n} for n in range(1, 11)])
    assert [seq for seq, _ in journal.read("j1", after=3, limit=4)] == [4, 5, 6, 7]
    assert [seq for seq, _ in journal.read("j1", after=8)] == [9, 10]
    assert journal.read("j1", after=10) == []
    assert journal.read("j1", after=99) == []


def test_read_rejects_negative_cursor(journal):
    journal.create_job("j1", "run", {}, "op-1")
    with pytest.raises(ValueError, match="must not be negative"):
        journal.read("j1", after=-1)


def test_expired_cursor_reports_first_retained(tmp_path):
    journal = _bounded(tmp_path, max_events=4)
    journal.append_many("j1", [{"n": n} for n in range(10)])  # retains 7..10
    for after in (0, 5):
        with pytest.raises(CursorExpired) as caught:
            journal.read("j1", after=after)
        assert caught.value.first_retained == 7
        assert isinstance(caught.value, SparkrunError)
    assert _seqs(journal, after=6) == [7, 8, 9, 10]
    journal.close()


def test_expired_cursor_after_reopen(tmp_path):
    _bounded(tmp_path, max_events=4).append_many("j1", [{"n": n} for n in range(10)])
    reopened = Journal(tmp_path / "bounded.db", max_events=4)
    with pytest.raises(CursorExpired) as caught:
        reopened.read("j1", after=5)
    assert caught.value.first_retained == 7
    assert _seqs(reopened, after=6) == [7, 8, 9, 10]
    reopened.close()


def test_unknown_job(journal):
    with pytest.raises(UnknownJob) as caught:
        journal.append("nope", {"n": 1})
    assert caught.value.job_id == "nope"
    with pytest.raises(UnknownJob):
        journal.append_many("nope", [{"n": 1}])
    with pytest.raises(UnknownJob):
        journal.read("nope")
    with pytest.raises(UnknownJob):
        journal.update_job("nope", state="running")
    assert journal.job("nope") is None


def test_event_must_be_a_dict(journal):
    journal.create_job("j1", "run", {}, "op-1")
    with pytest.raises(TypeError, match="list"):
        journal.append("j1", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="str"):
        journal.append_many("j1", [{"n": 1}, "text"])  # type: ignore[list-item]
    assert journal.read("j1") == []  # a rejected batch writes nothing
    assert journal.append("j1", {"n": 1}) == 1


def test_unserializable_event_leaves_sequence_intact(journal):
    journal.create_job("j1", "run", {}, "op-1")
    with pytest.raises(TypeError):
        journal.append("j1", {"obj": object()})
    assert journal.append("j1", {"n": 1}) == 1


def test_reopen_continues_sequences_and_keeps_trimmed_state(tmp_path):
    path = tmp_path / "j.db"
    first = Journal(path, max_events=5, max_event_bytes=1000)
    first.create_job("j1", "run", {"a": 1}, "op-1")
    first.append_many("j1", [{"n": n} for n in range(1, 9)])  # retains 4..8
    first.close()

    second = Journal(path, max_events=5, max_event_bytes=1000)
    record = second.job("j1")
    assert (record.first_retained, record.last_seq, record.arguments) == (4, 8, {"a": 1})
    assert second.append("j1", {"n": 9}) == 9
    assert _seqs(second, after=4) == [5, 6, 7, 8, 9]
    assert second.job("j1").first_retained == 5
    second.close()


def test_reopen_rebuilds_byte_bound_state(tmp_path):
    path = tmp_path / "j.db"
    first = Journal(path, max_event_bytes=50)
    first.create_job("j1", "run", {}, "op-1")
    first.append_many("j1", [{"p": "x" * 10}, {"p": "x" * 10}])  # 36 bytes retained
    first.close()

    second = Journal(path, max_event_bytes=50)
    assert second.append("j1", {"p": "x" * 10}) == 3  # 54 > 50: seq 1 must go
    assert _seqs(second, after=1) == [2, 3]
    second.close()


def test_concurrent_appends_keep_gapless_sequences(journal):
    jobs = [f"job-{i}" for i in range(8)]
    for job_id in jobs:
        journal.create_job(job_id, "run", {}, f"op-{job_id}")
    returned: dict[str, list[int]] = {}

    def writer(job_id: str) -> None:
        returned[job_id] = [journal.append(job_id, {"job": job_id, "i": i}) for i in range(1000)]

    threads = [threading.Thread(target=writer, args=(job_id,)) for job_id in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for job_id in jobs:
        assert returned[job_id] == list(range(1, 1001))
        rows = journal.read(job_id, limit=2000)
        assert [seq for seq, _ in rows] == list(range(1, 1001))
        assert [json.loads(body)["i"] for _, body in rows] == list(range(1000))


_KILLED_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from sparkrun.daemon.journal import Journal

    journal = Journal(Path(sys.argv[1]), max_events=100)
    journal.create_job("j1", "run", {}, "op-1")
    for n in range(150):
        seq = journal.append("j1", {"n": n})
    journal.append_many("j1", [{"n": 150}, {"n": 151}])
    print(seq + 2, flush=True)
    if sys.argv[2] == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(0)
    """
)


@pytest.mark.parametrize("death", ["sigkill", "os_exit"])
def test_committed_events_survive_kill(tmp_path, death):
    path = tmp_path / "killed.db"
    done = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(path), death], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == (-9 if death == "sigkill" else 0), done.stderr
    last = int(done.stdout.strip())
    assert last == 152

    reopened = Journal(path, max_events=100)
    assert reopened.job("j1").last_seq == 152
    rows = reopened.read("j1", after=52)
    assert [seq for seq, _ in rows] == list(range(53, 153))
    assert json.loads(rows[-1][1]) == {"n": 151}
    assert reopened.append("j1", {"n": 152}) == 153
    reopened.close()


def test_update_job_changes_fields(journal):
    journal.create_job("j1", "run", {}, "op-1")
    record = journal.update_job("j1", state="running", started_at=10.0, worker_pid=4242)
    assert (record.state, record.started_at, record.worker_pid) == ("running", 10.0, 4242)
    record = journal.update_job(
        "j1", state="failed", finished_at=11.5, error={"type": "LaunchError", "message": "boom"}, result=[1]
    )
    assert record.error == {"type": "LaunchError", "message": "boom"}
    assert (record.state, record.finished_at, record.result) == ("failed", 11.5, [1])
    assert journal.job("j1") == record


def test_update_job_rejects_unknown_state(journal):
    journal.create_job("j1", "run", {}, "op-1")
    with pytest.raises(ValueError, match="unknown job state"):
        journal.update_job("j1", state="done")
    assert journal.job("j1").state == "queued"


def test_update_job_rejects_unknown_field(journal):
    journal.create_job("j1", "run", {}, "op-1")
    with pytest.raises(ValueError, match="unknown job field"):
        journal.update_job("j1", operation="stop")
    with pytest.raises(ValueError, match="unknown job field"):
        journal.update_job("j1", last_seq=5)


def test_update_job_rejects_non_dict_error(journal):
    journal.create_job("j1", "run", {}, "op-1")
    with pytest.raises(ValueError, match="error must be a dict"):
        journal.update_job("j1", error="boom")


def test_appends_after_terminal_state_continue_sequence(journal):
    journal.create_job("j1", "run", {}, "op-1")
    journal.append_many("j1", [{"n": 1}, {"n": 2}])
    journal.update_job("j1", state="succeeded", finished_at=time.time())
    assert journal.append("j1", {"n": 3}) == 3
    assert _seqs(journal) == [1, 2, 3]


def test_jobs_newest_first_with_state_filter(journal):
    for i in range(5):
        journal.create_job(f"j{i}", "run", {}, f"op-{i}")
    journal.update_job("j1", state="running")
    journal.update_job("j3", state="succeeded")
    assert [r.job_id for r in journal.jobs()] == ["j4", "j3", "j2", "j1", "j0"]
    assert [r.job_id for r in journal.jobs(limit=2)] == ["j4", "j3"]
    assert [r.job_id for r in journal.jobs(states=["running", "succeeded"])] == ["j3", "j1"]
    with pytest.raises(ValueError, match="unknown job state"):
        journal.jobs(states=["bogus"])


def test_prune_keeps_newest_finished_jobs(journal):
    now = time.time()
    for i in range(5):
        journal.create_job(f"j{i}", "run", {}, f"op-{i}")
        journal.append(f"j{i}", {"n": i})
    for i in range(4):  # j4 stays running
        journal.update_job(f"j{i}", state="succeeded", finished_at=now - 100 + i)
    assert journal.prune(keep_finished=2) == 2
    assert {r.job_id for r in journal.jobs()} == {"j2", "j3", "j4"}
    with pytest.raises(UnknownJob):
        journal.read("j0")
    assert journal.prune(keep_finished=2) == 0


def test_prune_by_age_never_touches_active_jobs(journal):
    now = time.time()
    for i in range(3):
        journal.create_job(f"j{i}", "run", {}, f"op-{i}")
    journal.update_job("j0", state="failed", finished_at=now - 3600)
    journal.update_job("j1", state="cancelled", finished_at=now)
    assert journal.prune(keep_finished=200, older_than=60) == 1
    assert {r.job_id for r in journal.jobs()} == {"j1", "j2"}
    assert journal.prune(keep_finished=0) == 1
    assert [r.job_id for r in journal.jobs()] == ["j2"]


def test_to_json_round_trips(journal):
    journal.create_job("j1", "run", {"recipe": "r", "n": [1, 2]}, "op-1")
    journal.append("j1", {"n": 1})
    record = journal.update_job("j1", state="succeeded", finished_at=2.5, result={"ok": True})
    data = json.loads(json.dumps(record.to_json()))
    assert data == record.to_json()
    assert JobRecord(**data) == record
    assert set(data) == {
        "job_id", "operation", "arguments", "operation_id", "state", "created_at", "started_at",
        "finished_at", "result", "error", "worker_pid", "first_retained", "last_seq",
        "operation_started_at", "operation_finished_at",
    }  # fmt: skip


def test_rejects_non_positive_bounds(tmp_path):
    with pytest.raises(ValueError, match="positive"):
        Journal(tmp_path / "j.db", max_events=0)


def test_a_journal_of_the_first_release_gains_the_worker_column(tmp_path):
    import sqlite3

    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript(
        "CREATE TABLE jobs (job_id TEXT PRIMARY KEY, operation TEXT NOT NULL, arguments JSON NOT NULL,"
        " operation_id TEXT NOT NULL, state TEXT NOT NULL, created_at REAL NOT NULL, started_at REAL,"
        " finished_at REAL, result JSON, error JSON, worker_pid INTEGER);"
        "INSERT INTO jobs VALUES ('j1', 'sleep', '{}', 'o', 'running', 1.0, 2.0, NULL, NULL, NULL, 4242);"
    )
    db.commit()
    db.close()
    journal = Journal(path)
    record = journal.job("j1")
    assert (record.worker_pid, record.worker) == (4242, None)
    assert journal.update_job("j1", worker={"pid": 7, "start_ticks": 9}).worker == {"pid": 7, "start_ticks": 9}
    journal.close()


def test_a_file_that_is_not_a_journal_is_one_clear_error(tmp_path):
    from sparkrun.daemon.journal import JournalUnreadable

    path = tmp_path / "journal.sqlite3"
    path.write_bytes(b"not a database at all " * 100)
    with pytest.raises(JournalUnreadable) as raised:
        Journal(path)
    assert str(raised.value) == (
        f"the job journal is unreadable (path={path}, file is not a database); "
        "move it aside to start the daemon with an empty journal"
    )
