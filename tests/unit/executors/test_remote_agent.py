"""The remote agent, run exactly as a host runs it (the bootstrap command, modules and request on stdin), minus ssh."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkrun.core.executors.agent_transport import REMOTE_COMMAND, payload
from sparkrun.core.executors.inventory import HostEntry, SshOptions
from sparkrun.core.executors.ssh_transport import SshTransport


def _agent(request: object, home, *, raw: bytes | None = None) -> list[dict]:
    """Run the agent under ``sh -c`` (as sshd would) with ``home`` as the user's home.

    stdin stays open until the agent is done, as over ssh: its end would tell the agent the caller left.
    """
    env = {"PATH": os.environ["PATH"], "HOME": str(home)}
    data = payload() + (raw if raw is not None else json.dumps(request).encode() + b"\n")
    agent = subprocess.Popen(
        ["sh", "-c", REMOTE_COMMAND], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    agent.stdin.write(data)
    agent.stdin.flush()
    output = agent.stdout.read()
    agent.stdin.close()
    stderr = agent.stderr.read()
    assert agent.wait(timeout=30) == 0, stderr
    agent.stdout.close()
    agent.stderr.close()
    return [json.loads(line) for line in output.splitlines()]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _launch(name: str, argv: list[str], port: int, **extra: object) -> dict[str, object]:
    return {"action": "launch", "name": name, "argv": argv, "env": {}, "address": "127.0.0.1", "port": port, **extra}


def test_probe_reports_the_interpreter_and_a_port_in_use(tmp_path):
    (answer,) = _agent({"action": "probe", "address": "127.0.0.1", "port": 0}, tmp_path)
    assert answer["result"]["python"] == ".".join(map(str, sys.version_info[:3])) or answer["result"]["python"]
    assert answer["result"]["hosted"] == str(tmp_path / ".local" / "state" / "sparkrun" / "hosted")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (answer,) = _agent({"action": "probe", "address": "127.0.0.1", "port": port}, tmp_path)
    assert answer == {"error": f"port is already in use (port={port}, address=127.0.0.1)", "kind": "port_in_use"}


@pytest.mark.parametrize(
    ("request_", "kind", "text"),
    [
        ({"action": "rm -rf"}, "bad_request", "unknown request"),
        (["launch"], "bad_request", "unknown request"),
        ({"action": "stop", "name": "x", "identity": "nope", "grace": 1}, "bad_request", "identity is unreadable"),
        ({"action": "logs", "name": "../../etc/passwd"}, "bad_request", "it cannot be a path"),
        ({"action": "logs", "name": ".."}, "bad_request", "it cannot be a path"),
        ({"action": "launch"}, "bad_request", "malformed request: KeyError"),
        ({"action": "logs", "name": "never-ran"}, "no_log", "this host has no log of the deployment"),
    ],
)
def test_bad_requests_are_answered_never_obeyed(tmp_path, request_, kind, text):
    (answer,) = _agent(request_, tmp_path)
    assert answer["kind"] == kind and text in answer["error"]
    assert not (tmp_path / "etc").exists()


def test_a_request_that_is_not_json_gets_an_answer(tmp_path):
    (answer,) = _agent(None, tmp_path, raw=b"{not json\n")
    assert answer["kind"] == "bad_request"


def test_launch_alive_logs_and_stop_on_this_machine(tmp_path):
    port = _free_port()
    launch = _launch(
        "w",
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
        port,
        env={"TRACEPARENT": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"},
        http_path="/",
        timeout=20,
    )
    messages = _agent(launch, tmp_path)
    started = next(m for m in messages if m.get("event") == "started")
    assert [m["label"] for m in messages if m.get("event") == "step"] == [
        f"waiting for port {port}",
        "waiting for HTTP GET /",
    ]
    assert messages[-1] == {"result": {"ready": True}}
    identity = started["identity"]
    try:
        environ = Path(f"/proc/{identity['pid']}/environ").read_bytes().split(b"\0")
        assert b"TRACEPARENT=00-0123456789abcdef0123456789abcdef-0123456789abcdef-01" in environ
        assert os.getpgid(identity["pid"]) == identity["pid"]  # its own session and group
        (alive,) = _agent({"action": "alive", "identities": [identity, {**identity, "start_ticks": 1}]}, tmp_path)
        assert alive == {"result": [True, False]}  # a pid with another start time is not the workload
        lines = [
            m["line"] for m in _agent({"action": "logs", "name": "w", "tail": 5, "identity": identity}, tmp_path)[:-1]
        ]
        assert any("GET / HTTP" in line for line in lines)
    finally:
        (stopped,) = _agent({"action": "stop", "name": "w", "identity": identity, "grace": 5}, tmp_path)
    assert stopped == {"result": "terminated"}
    assert sorted(p.name for p in (tmp_path / ".local/state/sparkrun/hosted").iterdir()) == ["w.log"]
    (again,) = _agent({"action": "stop", "name": "w", "identity": identity, "grace": 5}, tmp_path)
    assert again == {"result": "already exited"}


def test_a_workload_that_exits_during_startup_is_reported_with_its_log(tmp_path):
    launch = _launch(
        "dies", [sys.executable, "-c", "print('cannot load the model'); raise SystemExit(3)"], 1, timeout=20
    )
    answer = _agent(launch, tmp_path)[-1]
    assert answer["kind"] == "not_ready"
    assert answer["error"].startswith("workload exited during startup with code 3")
    assert answer["error"].endswith("last log lines:\ncannot load the model")


def test_a_missing_command_and_a_missing_python3_are_named(tmp_path):
    launch = _launch("x", ["no-such-engine"], 1)
    answer = _agent(launch, tmp_path)[-1]
    assert answer == {"error": "command not found on this host (command='no-such-engine')", "kind": "command_not_found"}
    empty = tmp_path / "bin"
    empty.mkdir()
    done = subprocess.run(
        ["/bin/sh", "-c", REMOTE_COMMAND], input=b"", capture_output=True, env={"PATH": str(empty)}, timeout=10
    )
    assert done.returncode == 127
    error = SshTransport(HostEntry("spark-9"), tmp_path, SshOptions()).failure(done.stderr.decode(), done.returncode)
    assert error.kind == "python_missing"
    assert str(error) == (
        "spark-9: python3 is not installed on the host; "
        "sparkrun needs only python3 (3.8 or newer) and a POSIX shell there"
    )


def test_the_agent_stops_listening_when_the_caller_goes_away(tmp_path):
    launch = _launch("slow", [sys.executable, "-c", "import time; time.sleep(60)"], _free_port(), timeout=60)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    agent = subprocess.Popen(["sh", "-c", REMOTE_COMMAND], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    agent.stdin.write(payload() + json.dumps(launch).encode() + b"\n")
    agent.stdin.flush()
    started = json.loads(agent.stdout.readline())
    assert started["event"] == "started"
    began = time.monotonic()
    agent.stdin.close()  # the connection went away
    assert agent.wait(timeout=10) == 0 and time.monotonic() - began < 5
    (stopped,) = _agent({"action": "stop", "name": "slow", "identity": started["identity"], "grace": 1}, tmp_path)
    assert stopped == {"result": "terminated"}  # the workload outlived the agent; stop found it


def test_a_silent_followed_stream_ends_soon_after_its_cancel(tmp_path):
    import threading

    from sparkrun.core.executors.agent_transport import LocalTransport
    from sparkrun.core.processes import ProcessIdentity

    hosted = tmp_path / "hosted"
    hosted.mkdir()
    (hosted / "quiet.log").write_text("only line\n")
    transport = LocalTransport("localhost", hosted)
    cancel = threading.Event()
    request = {
        "action": "logs",
        "name": "quiet",
        "tail": 5,
        "follow": True,
        "identity": ProcessIdentity.of(os.getpid()).to_json(),
    }
    messages = transport.stream(request, cancel=cancel)
    assert next(messages) == {"line": "only line"}
    threading.Timer(0.3, cancel.set).start()
    began = time.monotonic()
    assert list(messages) == []  # nothing more, no answer owed, and no error for leaving
    assert time.monotonic() - began < 2
