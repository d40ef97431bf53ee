"""Workloads on several hosts through real OpenSSH servers on loopback (tests/integration/ssh_hosts.py).

Each test host is its own sshd, unix user and home: what a test finds in a host's home was put
there over SSH, and a process listed as that user was started over SSH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun import api
from sparkrun.application import initialize
from sparkrun.core.trace_ids import activity_span_id
from sparkrun.daemon.client import parse_sse
from sparkrun.errors import HostError
from tests.integration.daemon_harness import message_events
from tests.integration.ssh_hosts import SshHost

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[Path]:
    """The example server, copied where every test user can read it (a checkout may live in a private home)."""
    shared = Path(tempfile.mkdtemp(prefix="sparkrun-workloads-", dir="/var/tmp"))
    try:
        shutil.copytree(
            ROOT / "examples" / "workloads", shared / "workloads", ignore=shutil.ignore_patterns("__pycache__")
        )
        for path in [shared, *shared.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        yield shared / "workloads" / "openai_server.py"
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture
def recipe(server, tmp_path):
    """``recipe(name, hosts)``: the example chat server on ``hosts``."""

    def write(name: str, hosts: list[str], *, delay: float = 0.2) -> Path:
        return _recipe(tmp_path, name, hosts, server, delay)

    return write


def _recipe(directory: Path, name: str, hosts: list[str], server: Path, delay: float) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(
        f'recipe_version: "1"\n'
        f"name: {name}\n"
        f"runtime: process\n"
        f'command: "{{python}} {server} --host {{host}} --port {{port}} --model tiny-echo --startup-delay {delay}"\n'
        f"hosts: [{', '.join(hosts)}]\n"
        f"readiness:\n  http_path: /health\n  timeout: 20\n",
        encoding="utf-8",
    )
    return path


def _config(directory: Path, inventory: dict[str, Any]) -> Path:
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump({"hosts": inventory}), encoding="utf-8")
    return path


def _hosted(host: SshHost) -> Path:
    return host.home / ".local" / "state" / "sparkrun" / "hosted"


def _ask(url: str, text: str) -> str:
    body = json.dumps({"model": "tiny-echo", "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)["choices"][0]["message"]["content"]


def _owner(pid: int) -> str:
    import pwd

    return pwd.getpwuid(os.stat(f"/proc/{pid}").st_uid).pw_name


@pytest.fixture
def cli(tmp_path, ssh_hosts):
    """``cli(*args)`` runs the console script with an inventory of the two session hosts."""
    config = _config(tmp_path, ssh_hosts.inventory())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
    env.update(SPARKRUN_CONFIG=str(config), SPARKRUN_STATE_DIR=str(tmp_path / "state"), SPARKRUN_OTEL="0")

    def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        argv = [str(Path(sys.executable).with_name("sparkrun")), *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path)

    return run


def test_the_chat_recipe_on_two_hosts_answers_reports_per_host_and_stops(recipe, tmp_path, cli, ssh_hosts):
    spark1, spark2 = ssh_hosts.hosts
    recipe_path = recipe("duo", ["spark-1", "spark-2"])
    events_file = tmp_path / "events.jsonl"

    launched = cli("run", str(recipe_path), "--events-jsonl", str(events_file))
    assert launched.returncode == 0, launched.stderr
    match = re.search(
        r"duo is running at spark-1 (http://\S+) \(pid (\d+)\), spark-2 (http://\S+) \(pid (\d+)\)", launched.stdout
    )
    assert match, launched.stdout
    url1, pid1, url2, pid2 = match.group(1), int(match.group(2)), match.group(3), int(match.group(4))
    try:
        assert url1.startswith(f"http://{spark1.address}:") and url2.startswith(f"http://{spark2.address}:")
        assert "hello" in _ask(url1, "hello one") and "hello" in _ask(url2, "hello two")
        # each workload runs as its host's user, its record and log in that user's home
        assert _owner(pid1) == spark1.user and _owner(pid2) == spark2.user
        for host in (spark1, spark2):
            assert sorted(p.name for p in _hosted(host).glob("duo.*")) == ["duo.json", "duo.log"]

        status = cli("status", "--json")
        assert status.returncode == 0, status.stderr
        (deployment,) = json.loads(status.stdout)
        assert deployment["state"] == "running" and deployment["hosts"] == ["spark-1", "spark-2"]
        assert deployment["host_states"] == {"spark-1": "running", "spark-2": "running"}
        assert deployment["pids"] == [pid1, pid2]
        table = cli("status").stdout.splitlines()
        assert [row.split()[:3] for row in table[1:]] == [["duo", "spark-1", "running"], ["duo", "spark-2", "running"]]

        logs = cli("logs", "duo").stdout.splitlines()
        assert f"[spark-1] serving tiny-echo on {url1}" in logs and f"[spark-2] serving tiny-echo on {url2}" in logs
        only2 = cli("logs", "duo", "--host", "spark-2", "--tail", "50").stdout.splitlines()
        assert f"serving tiny-echo on {url2}" in only2 and not any(line.startswith("[") for line in only2)
        wrong = cli("logs", "duo", "--host", "spark-9")
        assert (
            wrong.returncode == 1
            and "does not run on this host (host='spark-9', hosts: spark-1, spark-2)" in wrong.stderr
        )

        events = [json.loads(line) for line in events_file.read_text().splitlines()]
        by_host: dict[str, list[str]] = {}
        for event in events:
            if event.get("type") == "feedback" and event.get("host") in ("spark-1", "spark-2"):
                by_host.setdefault(event["host"], []).append(event.get("stage"))
        for stages in by_host.values():  # one activity per host, with its own phases in order
            assert [s for s in dict.fromkeys(stages) if s] == ["check", "launching", "start", "readiness", "ready"]
        activities = {e["activity_id"] for e in events if e.get("host") == "spark-1" and e.get("type") == "feedback"}
        assert len(activities) == 1
    finally:
        stopped = cli("stop", "duo")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.strip() == "stopped duo (terminated)"
    assert cli("status", "--json").stdout.strip() == "[]"
    for host, pid in ((spark1, pid1), (spark2, pid2)):
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
        assert sorted(p.name for p in _hosted(host).glob("duo.*")) == ["duo.log"]  # the log stays, like a local one


def test_the_workload_gets_the_traceparent_of_its_host_activity(recipe, tmp_path, ssh_hosts):
    events: list[dict[str, Any]] = []
    sctx = initialize(
        config_path=_config(tmp_path, ssh_hosts.inventory()), state_dir=tmp_path / "state", events=events.append
    )
    result = api.run(api.RunOptions(recipe=str(recipe("traced", ["spark-1"]))), sctx=sctx)
    try:
        (host_activity,) = {e["activity_id"] for e in events if e.get("host") == "spark-1" and "activity_id" in e}
        expected = f"00-{result.operation_id}-{activity_span_id(result.operation_id, host_activity):016x}-01"
        environ = Path(f"/proc/{result.pids[0]}/environ").read_bytes().split(b"\0")
        assert f"TRACEPARENT={expected}".encode() in environ
    finally:
        api.stop("traced", sctx=sctx)


def test_a_host_that_fails_leaves_a_partial_deployment_that_stop_cleans_up(recipe, tmp_path, ssh_hosts):
    inventory = ssh_hosts.inventory()
    inventory["spark-3"] = {**inventory["spark-2"], "python": "/nonexistent/python3"}
    sctx = initialize(config_path=_config(tmp_path, inventory), state_dir=tmp_path / "state")
    recipe_path = recipe("trio", ["spark-1", "spark-3"])
    with pytest.raises(api.PartialLaunchError) as raised:
        api.run(api.RunOptions(recipe=str(recipe_path)), sctx=sctx)
    error = raised.value
    assert "trio runs on 1 of 2 hosts: running on spark-1 (http://127.0.0.2:" in str(
        error
    ) or "running on spark-1" in str(error)
    assert "failed on spark-3: command not found on this host (command='/nonexistent/python3')" in str(error)
    assert "`sparkrun stop trio`" in str(error)
    assert error.result.hosts == ("spark-1",) and set(error.failures) == {"spark-3"}
    (status,) = api.status(sctx=sctx)
    assert status.state == "running" and status.hosts == ("spark-1",)
    (stopped,) = api.stop("trio", sctx=sctx)
    assert stopped.hosts == {"spark-1": "terminated"}
    assert api.status(sctx=sctx) == []


def test_an_unreachable_host_fails_the_launch_before_anything_starts(recipe, tmp_path, ssh_hosts):
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    inventory = {**ssh_hosts.inventory(), "spark-3": {"address": "127.0.0.1", "port": port}}
    sctx = initialize(config_path=_config(tmp_path, inventory), state_dir=tmp_path / "state")
    recipe_path = recipe("three", ["spark-1", "spark-2", "spark-3"])
    unreachable = r"spark-3: host unreachable at 127\.0\.0\.1:\d+: .*Connection refused"
    with pytest.raises(Exception, match=rf"1 of 3 hosts cannot run the workload, nothing was started: {unreachable}"):
        api.run(api.RunOptions(recipe=str(recipe_path)), sctx=sctx)
    assert api.status(sctx=sctx) == []
    for host in ssh_hosts.hosts:
        assert not (_hosted(host) / "three.json").exists()


def test_a_refused_key_and_an_unknown_host_key_say_what_to_do(recipe, tmp_path, ssh_hosts):
    spark1 = ssh_hosts.hosts[0]
    known_before = ssh_hosts.known_hosts_without(spark1).read_text()
    inventory = {
        "wrong-key": {**spark1.inventory(), "identity_file": str(ssh_hosts.wrong_identity_file)},
        "new-host": {**spark1.inventory(), "known_hosts_file": str(ssh_hosts.known_hosts_without(spark1))},
    }
    sctx = initialize(config_path=_config(tmp_path, inventory), state_dir=tmp_path / "state")
    with pytest.raises(HostError) as refused:
        api.run(api.RunOptions(recipe=str(recipe("key", ["wrong-key"]))), sctx=sctx)
    assert refused.value.kind == "auth"
    assert str(refused.value).startswith(
        f"wrong-key: authentication refused for user {spark1.user} at {spark1.address}:{spark1.port} "
        f"(identity_file={ssh_hosts.wrong_identity_file}): "
    )
    with pytest.raises(HostError) as unknown:
        api.run(api.RunOptions(recipe=str(recipe("hostkey", ["new-host"]))), sctx=sctx)
    assert unknown.value.kind == "host_key"
    known = ssh_hosts.known_hosts_without(spark1)
    assert f"the host key of {spark1.address}:{spark1.port} is not in {known}" in str(unknown.value)
    assert "never accepts a host key on its own" in str(unknown.value)
    assert f"ssh-keyscan -p {spark1.port} {spark1.address} >> {known}" in str(unknown.value)
    assert known.read_text() == known_before  # nothing was accepted


def test_a_port_in_use_on_one_host_is_named(recipe, tmp_path, ssh_hosts):
    spark2 = ssh_hosts.hosts[1]
    sctx = initialize(config_path=_config(tmp_path, ssh_hosts.inventory()), state_dir=tmp_path / "state")
    with socket.socket() as taken:
        taken.bind((spark2.address, 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(
            Exception, match=rf"spark-2: port is already in use \(port={port}, address={spark2.address}\)"
        ):
            api.run(api.RunOptions(recipe=str(recipe("busy", ["spark-1", "spark-2"])), port=port), sctx=sctx)
    assert api.status(sctx=sctx) == []


def test_a_workload_killed_on_its_host_is_noticed_by_status(recipe, tmp_path, ssh_hosts):
    sctx = initialize(config_path=_config(tmp_path, ssh_hosts.inventory()), state_dir=tmp_path / "state")
    result = api.run(api.RunOptions(recipe=str(recipe("victim", ["spark-1", "spark-2"]))), sctx=sctx)
    try:
        os.kill(result.pids[1], signal.SIGKILL)  # spark-2's workload dies behind sparkrun's back
        from tests.integration.daemon_harness import wait_for

        wait_for(lambda: api.status(sctx=sctx)[0].state == "partial", timeout=10, what="status to notice")
        (status,) = api.status(sctx=sctx)
        assert status.host_states == {"spark-1": "running", "spark-2": "exited"}
    finally:
        (stopped,) = api.stop("victim", sctx=sctx)
    assert stopped.hosts == {"spark-1": "terminated", "spark-2": "already exited"}


def test_calls_reuse_one_connection_per_host(recipe, tmp_path, cli, ssh_hosts):
    spark1 = ssh_hosts.hosts[0]
    recipe_path = recipe("reuse", ["spark-1"])
    assert cli("run", str(recipe_path)).returncode == 0
    try:
        logins = ssh_hosts.log_tail(spark1, 10_000).count("Accepted publickey")
        for _ in range(3):
            assert cli("status", "--json").returncode == 0  # new processes, same master connection
        assert ssh_hosts.log_tail(spark1, 10_000).count("Accepted publickey") == logins
    finally:
        cli("stop", "reuse")


def test_a_daemon_job_launches_on_two_hosts_and_streams_per_host_events(recipe, tmp_path, start_daemon, ssh_hosts):
    daemon = start_daemon()
    config = yaml.safe_load(daemon.config.read_text())
    daemon.config.write_text(yaml.safe_dump({**config, "hosts": ssh_hosts.inventory()}))
    daemon.stop()
    daemon.start()
    recipe_path = recipe("served", ["spark-1", "spark-2"])
    job_id = daemon.submit("run", recipe=str(recipe_path))["job_id"]
    job = daemon.wait_state(job_id, timeout=60)
    assert job["state"] == "succeeded", job
    assert job["result"]["host_states"] == {"spark-1": "running", "spark-2": "running"}
    events = message_events(daemon.replay(job_id))
    hosts = {event.data.get("host") for event in events if event.data.get("stage") == "ready"}
    assert hosts == {"spark-1", "spark-2"}
    logs = daemon.wait_state(daemon.submit("logs", name="served", host="spark-2")["job_id"])
    assert any("serving tiny-echo" in line for line in logs["result"]), logs
    with daemon.client.stream(
        "GET", "/v1/streams/logs", params={"name": "served", "follow": "false"}, timeout=30
    ) as response:
        assert response.status_code == 200, response.read()
        streamed = list(parse_sse(response.iter_lines()))
    lines = [event.data for event in streamed if event.name == "message"]
    assert any(line.startswith("[spark-1] serving tiny-echo") for line in lines)
    assert any(line.startswith("[spark-2] serving tiny-echo") for line in lines)
    assert streamed[-1].name == "end" and "error" not in streamed[-1].data
    began = time.monotonic()
    with daemon.client.stream("GET", "/v1/streams/logs", params={"name": "served"}, timeout=30) as response:
        first = next(event for event in parse_sse(response.iter_lines()) if event.name == "message")
    assert first.data.startswith("[spark-")  # a live follow, left after its first line
    assert time.monotonic() - began < 10
    stop_id = daemon.submit("stop", name="served")["job_id"]
    stopped = daemon.wait_state(stop_id)
    assert stopped["state"] == "succeeded" and stopped["result"][0]["hosts"] == {
        "spark-1": "terminated",
        "spark-2": "terminated",
    }
    stop_events = message_events(daemon.replay(stop_id))
    assert {e.data.get("host") for e in stop_events if e.data.get("stage") == "stop"} >= {"spark-1", "spark-2"}


def test_the_workloads_request_spans_sit_under_the_launch_in_one_trace(tmp_path, recipe, phoenix):
    """sparkrun and the workload it starts both export to Phoenix: one trace, the operation id its trace id."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_", "TRACEPARENT"))}
    env.update(
        OTEL_EXPORTER_OTLP_ENDPOINT=phoenix.http_endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        SPARKRUN_STATE_DIR=str(tmp_path / "state"),
    )
    sparkrun = str(Path(sys.executable).with_name("sparkrun"))
    launched = subprocess.run(
        [sparkrun, "run", str(recipe("traced-local", ["localhost"])), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert launched.returncode == 0, launched.stderr
    records = [json.loads(line) for line in launched.stdout.splitlines()]
    result = records[-1]
    try:
        assert "hello" in _ask(result["url"], "hello traces")
    finally:
        subprocess.run([sparkrun, "stop", "traced-local"], capture_output=True, env=env, timeout=60, check=True)
    launch_activity = next(r["activity_id"] for r in records if r.get("source") == "sparkrun.launch")
    launch_span = f"{activity_span_id(result['operation_id'], launch_activity):016x}"
    from tests.integration.daemon_harness import wait_for

    def both_exported() -> list[dict] | None:  # two processes export to the trace, each in its own time
        spans = phoenix.spans(result["operation_id"], named="POST /v1/chat/completions", timeout=30)
        return spans if any(span["context"]["span_id"] == launch_span for span in spans) else None

    spans = wait_for(both_exported, timeout=30, what="the workload's and sparkrun's spans in Phoenix")
    (chat,) = [span for span in spans if span["name"] == "POST /v1/chat/completions"]
    assert chat["context"]["trace_id"] == result["operation_id"]
    assert chat["parent_id"] == launch_span  # the request span sits under the launch activity that started it


def test_ctrl_c_during_a_launch_on_two_hosts_leaves_nothing_running(tmp_path, recipe, ssh_hosts):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
    env.update(
        SPARKRUN_CONFIG=str(_config(tmp_path, ssh_hosts.inventory())),
        SPARKRUN_STATE_DIR=str(tmp_path / "state"),
        SPARKRUN_OTEL="0",
    )
    sparkrun = str(Path(sys.executable).with_name("sparkrun"))
    launching = subprocess.Popen(
        [sparkrun, "run", str(recipe("slow", ["spark-1", "spark-2"], delay=30)), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    pids = {}
    for line in launching.stdout:  # both hosts report their started workload before it is ready
        event = json.loads(line)
        if event.get("stage") == "start" and "pid" in event.get("metrics", {}):
            pids[event["host"]] = event["metrics"]["pid"]
        if len(pids) == 2:
            break
    launching.send_signal(signal.SIGINT)
    _, stderr = launching.communicate(timeout=30)
    assert launching.returncode == 130, stderr
    assert "interrupted" in stderr
    for host, pid in zip(ssh_hosts.hosts, (pids["spark-1"], pids["spark-2"]), strict=True):
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z", host.name
        assert not (_hosted(host) / "slow.json").exists()
    assert api.status(sctx=initialize(state_dir=tmp_path / "state")) == []


def test_following_the_logs_of_two_hosts_ends_when_the_deployment_stops(tmp_path, recipe, ssh_hosts):
    from tests.integration.daemon_harness import wait_for

    sctx = initialize(config_path=_config(tmp_path, ssh_hosts.inventory()), state_dir=tmp_path / "state")
    result = api.run(api.RunOptions(recipe=str(recipe("followed", ["spark-1", "spark-2"]))), sctx=sctx)
    followed: list[str] = []
    follower = threading.Thread(target=lambda: followed.extend(api.logs("followed", follow=True, sctx=sctx)))
    follower.start()
    try:
        wait_for(lambda: sum("serving tiny-echo" in line for line in followed) == 2, timeout=20, what="both hosts")
        for url in result.urls:
            _ask(url, "write a log line")
        posted = "POST /v1/chat/completions 200"
        wait_for(lambda: sum(posted in line for line in followed) == 2, timeout=20, what="new lines of both hosts")
    finally:
        api.stop("followed", sctx=sctx)
    follower.join(timeout=30)
    assert not follower.is_alive()  # the follow ended by itself once both workloads had exited
    assert {line.split("] ")[0] + "]" for line in followed if posted in line} == {"[spark-1]", "[spark-2]"}
    assert all(line.startswith(("[spark-1] ", "[spark-2] ")) for line in followed)


def test_a_master_connection_killed_behind_sparkrun_s_back_is_replaced(tmp_path, ssh_hosts):
    import re as regex

    from sparkrun.core.executors import Executors

    sctx = initialize(config_path=_config(tmp_path, ssh_hosts.inventory()), state_dir=tmp_path / "state")
    transport = Executors(sctx.config).transport_for("spark-1")
    assert transport.call({"action": "probe"})["python"]  # starts the master
    socket_path = transport._socket
    check = subprocess.run(
        ["ssh", "-o", f"ControlPath={socket_path}", "-O", "check", "spark-1"], capture_output=True, text=True
    )
    pid = int(regex.search(r"pid=(\d+)", check.stderr).group(1))
    os.kill(pid, signal.SIGKILL)
    from tests.integration.daemon_harness import wait_for

    wait_for(
        lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3],
        timeout=10,
        what="the master to die",
    )
    assert socket_path.is_socket()  # left behind
    fresh = Executors(sctx.config).transport_for("spark-1")  # a new command, as a user runs one
    assert fresh.call({"action": "probe"})["python"]  # answered over a direct login, and the dead socket noticed
    assert not socket_path.exists()
    assert fresh.call({"action": "probe"})["python"]  # a new master
    assert socket_path.is_socket()
    alive = subprocess.run(["ssh", "-o", f"ControlPath={socket_path}", "-O", "check", "spark-1"], capture_output=True)
    assert alive.returncode == 0
