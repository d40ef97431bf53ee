"""Issue 10, daemon side: the stream's default cursor, legacy event types end to end, honest trace export,
and what a person sees at a terminal. Real daemons, real workers, real pseudo-terminals."""

from __future__ import annotations

import sys

import pytest

from otel.local_store import TraceStore
from tests.integration.daemon_harness import DaemonProcess, message_events
from tests.integration.terminal import Terminal

pytestmark = pytest.mark.integration


def _sparkrun(daemon: DaemonProcess, *args: str) -> list[str]:
    return [sys.executable, "-m", "sparkrun", *args, "--state-dir", str(daemon.state_dir)]


# -- the events stream without a cursor --------------------------------------------------------


def test_no_cursor_means_from_the_oldest_retained_event_with_a_gap_first(start_daemon):
    daemon = start_daemon(args=("--max-events", "5"))
    job_id = daemon.submit("burst", count=50)["job_id"]
    daemon.wait_state(job_id)
    events = daemon.replay(job_id)  # neither Last-Event-ID nor ?after, as a fresh EventSource sends
    assert events[0].name == "gap" and events[0].data == {"after": 0, "first_retained": 46}
    assert [event.seq for event in message_events(events)] == [46, 47, 48, 49, 50]
    assert events[-1].name == "end"
    for cursor in ({"params": {"after": "3"}}, {"headers": {"Last-Event-ID": "3"}}):
        expired = daemon.client.get(f"/v1/jobs/{job_id}/events", **cursor)
        assert expired.status_code == 410 and expired.json()["first_retained"] == 46


def test_no_cursor_on_an_untrimmed_job_has_no_gap(daemon):
    job_id = daemon.submit("burst", count=3)["job_id"]
    daemon.wait_state(job_id)
    assert [event.name for event in daemon.replay(job_id)] == ["message", "message", "message", "end"]


# -- benchmark and setup events pass through every consumer --------------------------------------


def test_benchmark_and_setup_events_reach_the_journal_the_stream_the_terminal_and_the_trace(tmp_path):
    with DaemonProcess(tmp_path / "d", otel=True) as daemon:
        job_id = daemon.submit("legacy_events")["job_id"]
        job = daemon.wait_state(job_id)
        streamed = [event.data for event in message_events(daemon.replay(job_id))]
        assert [event["type"] for event in streamed] == ["setup", "benchmark", "benchmark", "feedback"]
        assert streamed[1]["kind"] == "schedule_started" and streamed[1]["total_tasks"] == 2
        rendered = daemon.run_cli("daemon", "jobs", "events", job_id, "--no-follow")
        assert rendered.stdout.splitlines()[:3] == [
            "setup    setup.host: Preparing the host",
            "benchmark schedule_started: 2 tasks scheduled",
            "benchmark task_end: task 0 done",
        ]
    (root,) = [
        span for span in TraceStore.in_state_dir(daemon.state_dir).spans(job["operation_id"]) if not span.parent_span_id
    ]
    assert [event["name"] for event in root.events] == [
        "sparkrun.setup",
        "sparkrun.benchmark.schedule_started",
        "sparkrun.benchmark.task_end",
    ]
    assert root.events[2]["attributes"]["sparkrun.duration_s"] == 0.5


# -- exporting a job's trace again keeps what was recorded ----------------------------------------


def test_a_re_export_keeps_the_recorded_times_and_does_not_become_the_latest(tmp_path):
    with DaemonProcess(tmp_path / "d", otel=True) as daemon:
        first = daemon.wait_state(daemon.submit("fail", message="planned")["job_id"])
        second = daemon.wait_state(daemon.submit("burst", count=3)["job_id"])
        store = TraceStore.in_state_dir(daemon.state_dir)

        def root_of(job: dict) -> tuple:
            (root,) = [s for s in store.spans(job["operation_id"]) if not s.parent_span_id]
            return root.start_ns, root.end_ns, root.status, root.status_message, root.attributes.get("error.type")

        live = root_of(first)
        exported = daemon.run_cli("daemon", "jobs", "trace", first["job_id"], "--export")
        assert exported.returncode == 0, exported.stderr
        assert root_of(first) == live  # same start and end to the nanosecond, same status and error
        assert live[2:] == ("error", "planned", "RuntimeError")
        latest = daemon.run_cli("trace", "show", "latest")
        assert latest.stdout.startswith(f"trace {second['operation_id']}")
        listed = [line.split()[5] for line in daemon.run_cli("trace", "list").stdout.splitlines()[1:]]
        assert listed == [second["operation_id"], first["operation_id"]]


# -- at a terminal -------------------------------------------------------------------------------


def test_job_events_at_a_terminal_show_a_status_line_then_leave_no_bar_behind(start_daemon):
    daemon = start_daemon(args=("--max-workers", "1"))
    blocker = daemon.submit("sleep", seconds=60)["job_id"]
    waiting = daemon.submit("burst", count=200)["job_id"]
    terminal = Terminal(_sparkrun(daemon, "daemon", "jobs", "events", waiting), daemon.env)
    terminal.wait_for(lambda t: "no events yet" in t.text())
    assert f"job {waiting[:12]} queued" in terminal.text()
    daemon.client.post(f"/v1/jobs/{blocker}/cancel")
    assert terminal.finish() == 0
    lines = terminal.lines()
    assert lines[-1] == f"job {waiting} succeeded"
    assert not any("━" in line or "no events yet" in line for line in lines)


def test_call_wait_at_a_terminal_shows_what_the_job_is_doing(daemon):
    terminal = Terminal(_sparkrun(daemon, "daemon", "call", "sleep", "--arg", "seconds=3", "--wait"), daemon.env)
    terminal.wait_for(lambda t: " running (" in t.text())
    assert terminal.finish() == 0
    assert terminal.lines()[-3:] == ["{", '  "slept": 3.0', "}"]
    assert not [line for line in terminal.lines() if " running (" in line]  # the status line is gone


def test_a_failed_job_at_a_terminal_ends_with_its_error(daemon):
    job_id = daemon.submit("fail", message="the registry said no")["job_id"]
    daemon.wait_state(job_id)
    terminal = Terminal(_sparkrun(daemon, "daemon", "jobs", "events", job_id), daemon.env)
    assert terminal.finish() == 0
    assert terminal.lines()[-1] == f"job {job_id} failed: the registry said no"
