"""Issue 9, classes 6, 8 and 9: hostile clients, telemetry settings that never break work, one-line errors.

Real daemons on loopback, real raw sockets, real CLI processes.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.daemon_harness import ROOT, DaemonProcess, daemon_environment, wait_for

pytestmark = pytest.mark.integration


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes the connection (whatever it still sends first) within the socket's timeout."""
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def _cli(state_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sparkrun", *args, "--state-dir", str(state_dir)],
        cwd=ROOT,
        env={**daemon_environment(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


# -- class 6: hostile or broken clients ------------------------------------------------------


def test_half_sent_request_headers_are_dropped_after_the_header_timeout(start_daemon):
    daemon = start_daemon(args=("--header-timeout", "1"))
    sockets = [_connect(daemon.url) for _ in range(50)]
    try:
        for sock in sockets:
            sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")  # the blank line never comes
        assert all(_closed_by_server(sock) for sock in sockets)
        kept_alive = _connect(daemon.url)  # a kept-alive connection gets the same deadline for its next request
        kept_alive.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept_alive.recv(65536).startswith(b"HTTP/1.1 200")
        kept_alive.sendall(b"GET /v1/health HTTP/1.1\r\n")
        assert _closed_by_server(kept_alive)
    finally:
        for sock in sockets:
            sock.close()
    assert httpx.get(f"{daemon.url}/v1/health", timeout=10).status_code == 200


def test_a_half_sent_body_is_408(start_daemon):
    daemon = start_daemon(args=("--body-timeout", "1"))
    sock = _connect(daemon.url)
    try:
        sock.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n"
            + f"Authorization: Bearer {daemon.token}\r\n\r\n".encode()
            + b'{"operation":'
        )
        answer = b""
        while chunk := sock.recv(65536):  # the server closes the connection after its answer
            answer += chunk
    finally:
        sock.close()
    assert answer.startswith(b"HTTP/1.1 408")
    assert answer.endswith(b'{"error":"the request body did not arrive in time (limit=1 s)"}')


def test_clients_that_leave_mid_body_log_one_short_line(daemon):
    for _ in range(20):
        sock = _connect(daemon.url)
        sock.sendall(
            b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
            + f"Authorization: Bearer {daemon.token}\r\n\r\n".encode()
            + b'{"operation": "sleep"'
        )
        sock.close()
    assert daemon.client.get("/v1/jobs").json()["jobs"] == []
    wait_for(lambda: "left before sending its whole request body" in daemon.output(), what="the log line")
    output = daemon.output()
    assert output.count("left before sending its whole request body") == 1
    assert "Traceback" not in output and "Exception in ASGI" not in output


def test_the_daemon_survives_file_descriptor_exhaustion_without_flooding_its_log(tmp_path):
    with DaemonProcess(tmp_path / "d", nofile=64) as daemon:
        held: list[socket.socket] = []
        try:
            for _ in range(300):
                with contextlib.suppress(OSError):
                    sock = _connect(daemon.url)
                    sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
                    held.append(sock)
            for _ in range(20):
                with contextlib.suppress(httpx.HTTPError):
                    httpx.get(f"{daemon.url}/v1/health", timeout=2)
        finally:
            for sock in held:
                sock.close()
        assert wait_for(lambda: _healthy(daemon.url), timeout=30, what="the daemon to answer again")
        job_id = daemon.submit("sleep", seconds=0.1)["job_id"]
        assert daemon.wait_state(job_id)["state"] == "succeeded"
        output = daemon.output()
    assert len(output.encode()) < 10_000, output[-2000:]
    assert "Traceback" not in output


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/v1/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


# -- class 8: telemetry configuration never breaks work --------------------------------------

BAD_TELEMETRY = [
    ({"OTEL_EXPORTER_OTLP_PROTOCOL": "bogus"}, "telemetry: OTEL_EXPORTER_OTLP_PROTOCOL is 'bogus'; "),
    ({"OTEL_RESOURCE_ATTRIBUTES": "team=a,garbage"}, "telemetry: OTEL_RESOURCE_ATTRIBUTES has 'garbage'; "),
]


@pytest.mark.parametrize(("env", "warning"), BAD_TELEMETRY, ids=["protocol", "resource-attributes"])
def test_a_bad_otel_value_in_the_daemons_environment_does_not_fail_jobs(tmp_path, env, warning):
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", **env}
    with DaemonProcess(tmp_path / "d", otel=True, env=env) as daemon:
        job_id = daemon.submit("burst", count=3)["job_id"]
        assert daemon.wait_state(job_id)["state"] == "succeeded"
    log = (daemon.state_dir / "daemon" / "workers" / f"{job_id}.log").read_text()
    assert [line for line in log.splitlines() if "telemetry" in line or "OTEL_" in line] == [
        next(line for line in log.splitlines() if warning in line)
    ]


@pytest.mark.parametrize(("env", "warning"), BAD_TELEMETRY, ids=["protocol", "resource-attributes"])
def test_a_bad_otel_value_in_the_cli_warns_once_and_the_command_works(tmp_path, env, warning):
    env = {"SPARKRUN_OTEL": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:9", **env}
    completed = _cli(tmp_path / "state", "stop", "--all", env=env)
    assert completed.returncode == 0, completed.stderr
    (line,) = completed.stderr.splitlines()
    assert line.startswith(f"WARNING otel.providers: {warning}")
    assert line.endswith("are not exported")


# -- class 9: clear errors, not tracebacks ---------------------------------------------------


@pytest.mark.parametrize("content", ["[]", "{}", '{"pid": "abc"}', '{"url": "http://127.0.0.1:1", "pid": 0}', "\xff"])
def test_a_malformed_daemon_record_is_one_line_and_stop_cleans_it(tmp_path, content):
    state = tmp_path / "state"
    (state / "daemon").mkdir(parents=True)
    record = state / "daemon" / "daemon.json"
    record.write_text(content, encoding="latin-1")
    status = _cli(state, "daemon", "status")
    assert status.returncode == 1
    assert status.stderr == (
        f"error: the daemon record is malformed (path={record}, expected {{url, pid}}); "
        "if no daemon runs, `sparkrun daemon stop` removes it\n"
    )
    stopped = _cli(state, "daemon", "stop")
    assert (stopped.returncode, stopped.stderr) == (0, "")
    assert stopped.stdout == "the daemon is not running; removed the record it left behind\n"


@pytest.mark.parametrize("token", ["directory", "empty", "not-utf8"])
def test_an_unusable_token_file_is_one_line_naming_it(tmp_path, token):
    daemon = DaemonProcess(tmp_path / "d")
    daemon.token_path.parent.mkdir(parents=True)
    if token == "directory":
        daemon.token_path.mkdir()
        expected = f"the token path is a directory (path={daemon.token_path}); remove it and start the daemon"
    else:
        daemon.token_path.write_bytes(b"" if token == "empty" else b"\xff\xfe\xfd")
        expected = (
            f"the daemon token file is empty or not a token (path={daemon.token_path}); "
            "delete it and restart the daemon to make a new one"
        )
    process = daemon.spawn()
    assert process.wait(timeout=60) == 1
    assert daemon.output().strip().splitlines() == [f"error: {expected}"]


def test_a_token_that_breaks_while_the_daemon_runs_is_one_line_for_clients(daemon):
    daemon.token_path.write_bytes(b"")
    completed = daemon.run_cli("daemon", "status")
    assert completed.returncode == 1
    assert completed.stderr == (
        f"error: the daemon token file is empty or not a token (path={daemon.token_path}); "
        "delete it and restart the daemon to make a new one\n"
    )


def test_a_corrupt_journal_is_one_line_naming_it(tmp_path):
    daemon = DaemonProcess(tmp_path / "d")
    journal = daemon.state_dir / "daemon" / "journal.sqlite3"
    journal.parent.mkdir(parents=True)
    journal.write_bytes(b"this is not a database " * 500)
    process = daemon.spawn()
    assert process.wait(timeout=60) == 1
    assert daemon.output().strip().splitlines() == [
        f"error: the job journal is unreadable (path={journal}, file is not a database); "
        "move it aside to start the daemon with an empty journal"
    ]


def test_a_port_in_use_is_one_line_naming_it(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        daemon = DaemonProcess(tmp_path / "d")
        process = daemon.spawn([*daemon.argv()[:-2], "--port", str(port)])
        assert process.wait(timeout=60) == 1
        message = (
            f"error: the port is already in use (host=127.0.0.1, port={port}); "
            "choose another with --port, or stop what listens there"
        )
        assert daemon.output().strip().splitlines() == [message]
        started = daemon.run_cli("daemon", "start", "--port", str(port))
        assert started.returncode == 1
        log = daemon.state_dir / "daemon" / "daemon.log"
        assert started.stderr == f"error: the daemon exited with code 1: {message} (log={log})\n"


def test_a_recipe_that_is_not_utf8_is_one_line(tmp_path):
    recipe = tmp_path / "latin.yaml"
    recipe.write_bytes(b"recipe_version: '1'\nname: caf\xe9\n")
    completed = _cli(tmp_path / "state", "run", str(recipe))
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == f"error: recipe is not UTF-8 text (path={recipe}, byte 29)"
    assert "Traceback" not in completed.stderr


def test_bad_daemon_limits_in_the_configuration_are_one_line(tmp_path):
    daemon = DaemonProcess(tmp_path / "d")
    daemon.config.write_text("daemon:\n  max_workers: lots\n", encoding="utf-8")
    process = daemon.spawn()
    assert process.wait(timeout=60) == 1
    (line,) = daemon.output().strip().splitlines()
    assert line.startswith("error: daemon.max_workers in the configuration: 'lots' is not a valid integer range")
    assert line.endswith(f"(path={daemon.config})")
