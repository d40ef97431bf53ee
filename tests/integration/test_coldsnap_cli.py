"""``sparkrun coldsnap`` against the example controller: the whole life cycle, live spans, real times, cancel."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from otel.local_store import TraceStore
from tests.integration.coldsnap_harness import HOSTS, SECRET
from tests.integration.daemon_harness import wait_for

pytestmark = pytest.mark.integration

STAGES = ["coldsnap.hardware", "coldsnap.artifact", "coldsnap.weights", "coldsnap.capsules"]


def _feedback(events: list[dict], source: str) -> list[dict]:
    return [e for e in events if e.get("type") == "feedback" and e["source"] == source]


def test_capture_restore_sleep_wake_status_through_the_cli(captured_snap):
    snap = captured_snap
    result, events = snap.result("restore")
    assert result["state"] == "succeeded" and result["operation"] == "restore" and result["workload"] == "snap"
    assert result["request_id"] == "snap-restore" and result["request_sha256"].startswith("sha256:")
    assert set(result["startup"]) == {"ttr_port_open_s", "ttr_http_ready_s", "ttft_s"}
    assert result["prepared"]["kind"] == "coldsnap-restore-preparation" and not result["warnings"]
    for host in HOSTS:  # restored on both hosts, and answering
        assert snap.chat(host, "one two") == "echo: two one"
    steps = [e["step"]["label"] for e in events if e.get("type") == "progress" and e.get("step")]
    assert steps[:4] == STAGES and "restoring" in steps  # the preparation stages, then the runtime steps
    phases = {(e["slug"], e["status"]) for e in events if e.get("type") == "progress"}
    assert ("build", "skipped") in phases and ("post_launch", "succeeded") in phases
    ready = _feedback(events, "coldsnap.runtime.startup_http_ready")
    assert {e["host"] for e in ready} == set(HOSTS)  # host from the unit's host in the request
    final = [e for e in ready if e["status"] == "succeeded"]
    assert {e["metrics"]["unit"] for e in final} == {"unit-0", "unit-1"} and all("clock" in e["metrics"] for e in final)
    (summary,) = [e for e in _feedback(events, "coldsnap") if e["status"] == "succeeded"]
    assert summary["metrics"]["observation"] == "rank0-acceptance-v1" and "ttft_s" in summary["metrics"]

    slept, _ = snap.result("sleep")
    assert slept["state"] == "succeeded" and all(snap.chat(host) is None for host in HOSTS)
    woken, _ = snap.result("wake")
    assert woken["state"] == "succeeded" and all(snap.chat(host) for host in HOSTS)
    status, events = snap.result("status")
    assert status["state"] == "succeeded" and _feedback(events, "coldsnap.units.status")
    snap.result("sleep")
    assert not snap.leftovers()


def _receipt_starts(receipt: dict) -> dict[str, tuple[int, float]]:
    """Each receipt span's start in Unix ns (its clock's origin plus its offset) and its duration."""
    origins = {clock["id"]: clock["origin_unix_ns"] for clock in receipt["timing"]["clocks"]}
    return {
        span["id"]: (origins[span["clock"]] + round(span["start_offset_seconds"] * 1e9), span["duration_seconds"])
        for span in receipt["timing"]["spans"]
    }


def test_the_trace_has_the_controllers_tree_at_its_own_times(captured_snap):
    snap = captured_snap
    result, _ = snap.result("restore")
    receipt = json.loads(Path(result["receipt_path"]).read_text())
    spans = TraceStore.in_state_dir(snap.state_dir).spans(result["operation_id"])
    (execute,) = [s for s in spans if s.name == "coldsnap.restore" and s.attributes["sparkrun.stage"] == "execute"]
    prefix = execute.attributes["sparkrun.activity_id"] + "/"
    imported = {
        s.attributes["sparkrun.activity_id"][len(prefix) :]: s
        for s in spans
        if str(s.attributes.get("sparkrun.activity_id", "")).startswith(prefix)
    }
    expected = _receipt_starts(receipt)
    assert set(imported) == set(expected)
    for span_id, (start_ns, duration) in expected.items():
        span = imported[span_id]
        assert abs(span.start_ns - start_ns) < 1_000, span_id  # the controller's own start, to the microsecond
        assert abs((span.end_ns - span.start_ns) - duration * 1e9) < 1_000, span_id
    by_id = {s.span_id: s for s in spans}
    controller = next(s for s in imported.values() if s.name == "coldsnap.controller")
    assert controller.parent_span_id == execute.span_id
    for span in receipt["timing"]["spans"]:  # the hierarchy: a parent, or the controller span
        child = imported[span["id"]]
        if span.get("parent"):
            assert child.parent_span_id == imported[span["parent"]].span_id
        elif span["name"] != "coldsnap.controller":
            assert by_id[child.parent_span_id].name == "coldsnap.controller"
    hosts = {s.attributes.get("host.name") for s in imported.values() if s.name == "coldsnap.runtime.startup_ttft"}
    assert hosts == set(HOSTS)
    shown = subprocess.run(
        [*snap.argv("status")[:3], "trace", "show", result["operation_id"], "--state-dir", str(snap.state_dir)],
        env=snap.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    line = next(line for line in shown.stdout.splitlines() if "coldsnap.capsule.pull" in line)
    offset_ms = (
        imported[next(k for k, s in imported.items() if s.name == "coldsnap.capsule.pull")].start_ns
        - min(s.start_ns for s in spans)
    ) / 1e6
    assert f"+{offset_ms:.0f}ms" in line  # drawn at its real offset
    snap.result("sleep")


def test_short_spans_are_not_announced_but_are_recorded(snap, tmp_path):
    events_file = tmp_path / "events.jsonl"
    done = snap.cli("status", "--events-jsonl", str(events_file), modes=("slow",))
    assert done.returncode == 0, done.stderr
    assert "example.slow done in 1.5" in done.stdout  # a long span is announced
    assert "state.read" not in done.stdout  # a short one is not...
    recorded = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert _feedback(recorded, "coldsnap.state.read")  # ...but it is in the record (and the journal, the trace)
    verbose = snap.cli("status", "-v")
    assert "state.read done in" in verbose.stdout


def test_a_failed_span_fails_the_operation_with_the_receipts_error(snap):
    done = snap.cli("status", modes=("fail-span",))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("error: the controller's status failed: ") and "injected" in error
    assert "error    coldsnap.example.injected_failure" in done.stdout  # announced: it failed
    (trace_id,) = TraceStore.in_state_dir(snap.state_dir).trace_ids()
    spans = TraceStore.in_state_dir(snap.state_dir).spans(trace_id)
    (failed,) = [s for s in spans if s.name == "coldsnap.example.injected_failure"]
    assert failed.status == "error"


def test_the_secret_in_the_recipe_reaches_the_workload_and_nothing_else(captured_snap, tmp_path):
    snap = captured_snap
    events_file = tmp_path / "events.jsonl"
    done = snap.cli("restore", "--json", "--events-jsonl", str(events_file))
    assert done.returncode == 0, done.stderr
    pid = next(pid for pid in snap.leftovers() if "openai_server" in Path(f"/proc/{pid}/cmdline").read_text())
    assert SECRET in Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")  # the workload has it
    assert SECRET not in done.stdout + done.stderr + events_file.read_text()
    for path in snap.state_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    snap.result("sleep")


def test_a_secret_the_controller_echoes_back_is_redacted_everywhere(snap, tmp_path):
    events_file = tmp_path / "events.jsonl"
    modes = ('receipt-field:state="failed"', f'receipt-field:error="auth failed with token {SECRET}"', "exit:1")
    done = snap.cli("status", "--events-jsonl", str(events_file), modes=modes)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: the controller's status failed: auth failed with token [redacted]"
    )
    assert SECRET not in done.stdout + done.stderr + events_file.read_text()
    for path in (snap.state_dir / "traces").rglob("*"):
        assert SECRET.encode() not in path.read_bytes(), path


def test_restore_evicts_the_deployment_sparkrun_runs_under_that_name(tmp_path):
    from tests.integration.coldsnap_harness import Snap

    snap = Snap(tmp_path, hosts=("127.0.0.1",))
    try:
        assert snap.cli("capture").returncode == 0
        run = subprocess.run(
            [*snap.argv("status")[:3], "run", str(snap.recipe), "--state-dir", str(snap.state_dir)],
            env=snap.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        restored = snap.cli("restore", target="snap")  # the running deployment, by name
        assert restored.returncode == 0, restored.stderr
        assert "Runtime: evicted snap (terminated)" in restored.stdout
        assert not (snap.state_dir / "deployments" / "snap.json").exists()
        assert snap.chat("127.0.0.1") == "echo: snap hello"
        snap.result("sleep")
    finally:
        snap.cleanup()


def test_a_bad_preparation_stops_the_restore_before_anything_is_evicted(captured_snap):
    done = captured_snap.cli("restore", modes=("bad-preparation:operation_id",))
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "operation_id" in done.stderr.splitlines()[-1] and "snap-restore" in done.stderr.splitlines()[-1]
    assert "Runtime: started" not in done.stdout and not captured_snap.leftovers()


def test_a_controller_that_cannot_start_is_one_clear_line(snap):
    done = subprocess.run(
        [*snap.argv("status")[:-4], "--controller", "/nonexistent/coldsnap", "--state-dir", str(snap.state_dir)],
        env=snap.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "error: the ColdSnap controller could not be started (No such file or directory: /nonexistent/coldsnap)"
    )


def _spans_started(path: Path, source: str) -> bool:
    if not path.exists():
        return False
    return any(json.loads(line).get("source") == source for line in path.read_text().splitlines() if line.strip())


@pytest.mark.parametrize(
    ("modes", "interrupts", "said"),
    [
        (("hang",), 1, "The controller cleaned up and exited"),
        (("ignore-term",), 2, "The controller was killed: cleanup unconfirmed"),
    ],
    ids=["cleans-up", "killed"],
)
def test_ctrl_c_cancels_the_controller_as_the_contract_says(snap, tmp_path, modes, interrupts, said):
    events_file = tmp_path / "events.jsonl"
    process = subprocess.Popen(
        snap.argv("status", "--events-jsonl", str(events_file), modes=modes),
        env=snap.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Spans arrive while the controller still runs: it is hanging inside example.hang now.
        wait_for(lambda: _spans_started(events_file, "coldsnap.example.hang"), timeout=60, what="the hang span")
        assert process.poll() is None and _spans_started(events_file, "coldsnap.state.read")
        for _ in range(interrupts):
            process.send_signal(signal.SIGINT)
            time.sleep(0.5)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert said in out and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: interrupted; the controller's status was cancelled")
    assert not snap.leftovers()  # no controller left behind either way
