"""Issue 9, classes 2 and 3: names never become paths outside their folder; a pid is never signalled on trust.

Real CLI processes, real daemons, real files and real bystander processes (a
``sleep`` in its own session stands for "somebody else's process that now has
the recorded pid").
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkrun import api
from sparkrun.application import initialize
from sparkrun.core.names import NAME_RULE
from sparkrun.core.processes import boot_id, start_ticks
from sparkrun.core.short_repr import short_repr
from sparkrun.daemon.journal import Journal
from tests.integration.daemon_harness import ROOT, DaemonProcess, daemon_environment, process_alive, wait_for

pytestmark = pytest.mark.integration

EXAMPLE_RECIPE = ROOT / "examples" / "recipes" / "example-chat.yaml"
BAD_NAMES = ["../../elsewhere/app", "/etc/passwd", "..", ".", "a/b", "Upper", "x" * 64, "", "-dash"]


def _cli(state_dir: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkrun", *args, "--state-dir", str(state_dir)],
        cwd=ROOT,
        env=daemon_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _rule(field: str, name: str) -> str:
    return f"{field} is {short_repr(name)}; a name is {NAME_RULE}"


@pytest.fixture
def bystander():
    """A process that is not sparkrun's, leading its own session (as a workload or worker would)."""
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    yield process
    process.kill()
    process.wait(timeout=10)


# -- class 2: names that become paths --------------------------------------------------------


@pytest.mark.parametrize("name", BAD_NAMES)
def test_run_with_a_name_that_is_not_a_name_is_refused_and_writes_nothing(tmp_path, name):
    state = tmp_path / "one" / "two" / "state"
    completed = _cli(state, "--no-otel", "run", str(EXAMPLE_RECIPE), "--name", name)
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == f"error: {_rule('name', name)}"
    assert not (tmp_path / "one" / "elsewhere").exists() and not (tmp_path / "elsewhere").exists()
    assert not list((state / "deployments").glob("*")) if (state / "deployments").exists() else True


@pytest.mark.parametrize("command", ["stop", "logs"])
def test_stop_and_logs_refuse_a_name_that_is_not_a_name(tmp_path, command):
    outside = tmp_path / "secret.json"
    outside.write_text("{}")
    completed = _cli(tmp_path / "state", command, "../../secret")
    assert completed.returncode == 1
    assert completed.stderr == f"error: {_rule('deployment', '../../secret')}\n"
    assert outside.read_text() == "{}"


def test_the_library_refuses_a_bad_name_before_any_file_is_written(tmp_path):
    sctx = initialize(state_dir=tmp_path / "state")
    with pytest.raises(ValueError, match=rf"^name is '\.\./x'; a name is {NAME_RULE}$"):
        api.run(api.RunOptions(recipe=str(EXAMPLE_RECIPE), name="../x"), sctx=sctx)
    with pytest.raises(ValueError, match=r"^deployment is '\.\./x'; a name is "):
        api.stop("../x", sctx=sctx)
    with pytest.raises(ValueError, match=r"^deployment is '\.\./x'; a name is "):
        api.logs("../x", sctx=sctx)
    assert not (tmp_path / "x.json").exists() and not (tmp_path / "state" / "deployments").exists()


def test_a_record_that_links_outside_its_folder_is_refused(tmp_path):
    state = tmp_path / "state"
    (state / "deployments").mkdir(parents=True)
    outside = tmp_path / "unrelated.json"
    outside.write_text('{"keep": true}')
    (state / "deployments" / "app.json").symlink_to(outside)
    stopped = _cli(state, "stop", "app")
    assert stopped.returncode == 1
    assert stopped.stderr == (
        f"error: deployment 'app' resolves outside its folder (path={state / 'deployments' / 'app.json'}); "
        "remove the link at that path\n"
    )
    listed = _cli(state, "status")
    assert listed.returncode == 0 and listed.stdout == "no deployments\n"
    assert outside.read_text() == '{"keep": true}'


@pytest.mark.parametrize(("operation", "arguments"), [("run", {"recipe": "x"}), ("stop", {}), ("logs", {})])
def test_the_daemon_refuses_a_bad_name_argument(daemon, operation, arguments):
    response = daemon.client.post(
        "/v1/jobs", json={"operation": operation, "arguments": {**arguments, "name": "../../elsewhere/app"}}
    )
    assert response.status_code == 400
    assert response.json() == {"error": _rule("argument name", "../../elsewhere/app")}


@pytest.mark.parametrize("name", ["../../../../etc/passwd", "../daemon/daemon", "", "a b"])
def test_the_log_stream_refuses_a_bad_name(daemon, name):
    response = daemon.client.get("/v1/streams/logs", params={"name": name, "follow": "false"})
    assert response.status_code == 400
    assert response.json() == {"error": _rule("name", name)}


# -- class 3: signalling the wrong process ---------------------------------------------------


def test_recovery_never_signals_a_worker_record_it_cannot_prove(tmp_path, bystander):
    daemon = DaemonProcess(tmp_path / "d")
    journal = Journal(daemon.state_dir / "daemon" / "journal.sqlite3")
    ticks = start_ticks(bystander.pid)
    records = {
        "a" * 32: {"worker_pid": bystander.pid},  # a journal of an earlier version: a bare pid
        "b" * 32: {"worker_pid": bystander.pid, "worker": {"pid": bystander.pid, "start_ticks": ticks + 1}},
        "c" * 32: {
            "worker_pid": bystander.pid,
            "worker": {"pid": bystander.pid, "start_ticks": ticks, "boot_id": boot_id(), "marker": "not-its-marker"},
        },
        "d" * 32: {"worker_pid": 1, "worker": {"pid": 1, "start_ticks": start_ticks(1)}},
    }
    for job_id, fields in records.items():
        journal.create_job(job_id, "sleep", {}, "1" * 32)
        journal.update_job(job_id, state="running", started_at=time.time(), **fields)
    journal.close()
    with daemon:
        for job_id in records:
            assert daemon.job(job_id)["state"] == "lost"
    assert bystander.poll() is None and process_alive(bystander.pid)
    assert daemon.output().count("is gone or not provably ours; not signalled") == 4


def test_recovery_ends_a_stray_worker_that_is_provably_ours(daemon):
    # A job that stays silent, so its worker outlives the daemon (a reporting one exits on the broken pipe).
    job_id = daemon.submit("stderr_flood", kib=0, then_sleep=120)["job_id"]
    worker = wait_for(lambda: daemon.job(job_id)["worker_pid"], what="the worker")
    daemon.kill9()
    assert process_alive(worker)
    daemon.start()
    assert daemon.job(job_id)["state"] == "lost"
    wait_for(lambda: not process_alive(worker), timeout=15, what="the stray worker to end")
    assert "ended the worker a previous daemon left" in daemon.output()


@pytest.mark.parametrize("pid", ["0", "-1", "1", "self", "bystander"])
def test_daemon_stop_never_signals_the_pid_of_a_stale_record(tmp_path, bystander, pid):
    state = tmp_path / "state"
    (state / "daemon").mkdir(parents=True)
    value = {"self": os.getpid(), "bystander": bystander.pid}.get(pid, pid)
    (state / "daemon" / "daemon.json").write_text(f'{{"url": "http://127.0.0.1:9", "pid": {value}}}')
    completed = _cli(state, "daemon", "stop")
    assert (completed.returncode, completed.stderr) == (0, "")
    assert completed.stdout == "the daemon is not running; removed the record it left behind\n"
    assert not (state / "daemon" / "daemon.json").exists()
    assert bystander.poll() is None


def test_daemon_start_right_after_kill_9_even_while_the_dead_daemon_is_a_zombie(tmp_path):
    first = DaemonProcess(tmp_path / "d").start()
    try:
        os.kill(first.process.pid, signal.SIGKILL)  # not reaped: it stays a zombie of this test process
        wait_for(lambda: not process_alive(first.process.pid), what="the daemon to be a zombie")
        started = first.run_cli("daemon", "start", "--port", "0")
        assert started.returncode == 0, started.stderr
        assert started.stderr == "removed the record of a daemon that is no longer running\n"
        info = json.loads(first.info_path.read_text())
        stopped = first.run_cli("daemon", "stop")
        assert stopped.stdout == f"daemon stopped (pid {info['pid']})\n"
    finally:
        first.stop()


@pytest.mark.parametrize("proof", ["wrong start time", "no start time", "right start time, wrong marker"])
def test_stop_never_signals_a_deployment_record_it_cannot_prove(tmp_path, bystander, proof):
    state = tmp_path / "state"
    (state / "deployments").mkdir(parents=True)
    ticks = start_ticks(bystander.pid)
    record = {
        "name": "app",
        "recipe": "app",
        "recipe_path": "/x.yaml",
        "runtime": "process",
        "hosts": ["localhost"],
        "port": 9,
        "command": "sleep 300",
        "pid": bystander.pid,
        "start_ticks": {"wrong start time": ticks + 7, "no start time": None}.get(proof, ticks),
        "log_path": str(state / "deployments" / "app.log"),
        "url": "http://127.0.0.1:9",
        "operation_id": "1" * 32,
        "started_at": time.time(),
        "boot_id": boot_id(),
        "marker": "not-its-marker",
    }
    (state / "deployments" / "app.json").write_text(json.dumps(record))
    status = _cli(state, "status", "--json")
    assert [d["state"] for d in json.loads(status.stdout)] == ["exited"]
    everything = _cli(state, "stop", "--all")
    assert (everything.returncode, everything.stdout.splitlines()[-1]) == (0, "nothing is running")
    one = _cli(state, "stop", "app")
    assert one.returncode == 1
    assert one.stderr == "error: deployment is not running; its record is removed (deployment='app')\n"
    assert bystander.poll() is None and process_alive(bystander.pid)
