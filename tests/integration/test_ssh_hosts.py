"""The SSH test hosts are real: separate users, homes and host keys, refusals, and a clean stop."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.ssh_hosts import SshHost, SshHosts

pytestmark = pytest.mark.integration


def _ssh(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)


def _login(harness: SshHosts, host: SshHost, command: str) -> str:
    """``command``'s output on ``host``; a failed login shows sshd's side of the story."""
    done = _ssh(host.ssh_argv(command))
    assert done.returncode == 0, f"{done.stderr}\n--- sshd log of {host.name}:\n{harness.log_tail(host)}"
    return done.stdout


def _pids_of(uid: int) -> list[int]:
    """Processes of ``uid`` still alive: a zombie has already ended, it only awaits its parent's wait()."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or entry.stat().st_uid != uid:
                continue
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            pids.append(int(entry.name))
    return pids


def _wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.fixture
def control_dir() -> Iterator[Path]:
    """A short directory for ControlMaster sockets: a unix socket path must stay under 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="cm-") as directory:
        yield Path(directory)


def test_each_host_logs_in_as_its_own_user_with_its_own_home(ssh_hosts):
    assert [host.name for host in ssh_hosts.hosts] == ["spark-1", "spark-2"]
    seen = set()
    for host in ssh_hosts.hosts:
        user, home, cwd = _login(ssh_hosts, host, 'id -un; echo "$HOME"; pwd').split()
        assert (user, home, cwd) == (host.user, str(host.home), str(host.home))
        seen.add((host.address, host.user, host.home))
    assert len(seen) == 2  # no two hosts share an address, a user or a home


def test_a_file_written_on_one_host_is_not_visible_on_another(ssh_hosts):
    first, second = ssh_hosts.hosts
    name = f"marker-{uuid.uuid4().hex}"
    _login(ssh_hosts, first, f"echo spark-1 > {name}")
    try:
        assert (first.home / name).read_text() == "spark-1\n"
        assert name not in _login(ssh_hosts, second, 'ls -A "$HOME"').split()
        # Not even by its absolute path: each home belongs to its user alone.
        peek = _ssh(second.ssh_argv(f"cat {first.home / name}"))
        assert peek.returncode != 0
        assert "Permission denied" in peek.stderr
    finally:
        (first.home / name).unlink()


def test_a_key_no_host_authorizes_is_refused(ssh_hosts):
    host = ssh_hosts.hosts[0]
    done = _ssh(host.ssh_argv("true", identity_file=ssh_hosts.wrong_identity_file))
    assert done.returncode == 255
    assert "Permission denied (publickey)" in done.stderr


def test_a_host_missing_from_known_hosts_is_refused(ssh_hosts):
    host, other = ssh_hosts.hosts
    without = ssh_hosts.known_hosts_without(host)
    assert f"[{host.address}]:{host.port} " not in without.read_text()
    done = _ssh(host.ssh_argv("true", known_hosts_file=without))
    assert done.returncode == 255
    assert "Host key verification failed" in done.stderr
    # The same file still lets the client into every other host.
    assert _ssh(other.ssh_argv("true", known_hosts_file=without)).returncode == 0


def test_the_inventory_is_plain_data_a_config_can_hold(ssh_hosts):
    inventory = ssh_hosts.inventory()
    assert list(inventory) == ["spark-1", "spark-2"]
    assert json.loads(json.dumps(inventory)) == inventory
    host = ssh_hosts.hosts[0]
    assert inventory["spark-1"] == {
        "address": host.address,
        "user": host.user,
        "port": host.port,
        "identity_file": str(ssh_hosts.identity_file),
        "known_hosts_file": str(ssh_hosts.known_hosts_file),
    }


def test_ten_parallel_sessions_share_one_multiplexed_connection(ssh_hosts, control_dir):
    host = ssh_hosts.hosts[0]
    path = {"ControlPath": f"{control_dir}/%C"}
    master = subprocess.Popen(
        host.ssh_argv(options={"ControlMaster": "yes", "SessionType": "none", **path}),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        assert _wait_for(lambda: any(control_dir.iterdir()) or master.poll() is not None)
        assert master.poll() is None, master.stderr.read() if master.stderr else ""
        logins = ssh_hosts.log_tail(host, 100_000).count("Accepted publickey")
        sessions = [
            subprocess.Popen(
                host.ssh_argv(f"echo {i}", options=path),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(10)
        ]
        outputs = [session.communicate(timeout=30) for session in sessions]
        assert [out.strip() for out, _ in outputs] == [str(i) for i in range(10)], [err for _, err in outputs]
        # All ten ran over the master's connection: sshd saw no new login.
        assert ssh_hosts.log_tail(host, 100_000).count("Accepted publickey") == logins
    finally:
        master.terminate()
        master.wait(timeout=10)


def test_four_hosts_have_four_users_addresses_and_keys(four_ssh_hosts):
    hosts = four_ssh_hosts.hosts
    assert [host.name for host in hosts] == ["spark-1", "spark-2", "spark-3", "spark-4"]
    assert len({host.address for host in hosts}) == len({host.user for host in hosts}) == 4
    assert len(four_ssh_hosts.known_hosts_file.read_text().splitlines()) == 4
    logins = [
        subprocess.Popen(host.ssh_argv("id -un"), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True)
        for host in hosts
    ]
    assert [login.communicate(timeout=30)[0].strip() for login in logins] == [host.user for host in hosts]


def test_stop_ends_sshd_its_sessions_and_the_users_workloads(start_ssh_hosts, control_dir):
    harness = start_ssh_hosts(1)
    host = harness.hosts[0]
    uid = host.home.stat().st_uid
    pid = harness.sshd_pid(host)
    assert pid is not None
    # A workload that outlives its login, and a multiplexed connection still open.
    _login(harness, host, "nohup sleep 300 >/dev/null 2>&1 &")
    master = subprocess.Popen(
        host.ssh_argv(options={"ControlMaster": "yes", "SessionType": "none", "ControlPath": f"{control_dir}/%C"}),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait_for(lambda: any(control_dir.iterdir()) or master.poll() is not None)
        assert master.poll() is None
        assert _pids_of(uid)

        harness.stop()

        assert not Path(f"/proc/{pid}").exists()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host.address, host.port), timeout=2).close()
        assert _pids_of(uid) == []
        # The server side of the multiplexed connection is gone, so the client master ends by itself.
        assert master.wait(timeout=10) == 255
    finally:
        if master.poll() is None:
            master.kill()
            master.wait()


def test_a_new_start_wipes_the_home_and_kills_what_the_user_left_running(start_ssh_hosts):
    old = start_ssh_hosts(1)
    host = old.hosts[0]
    old.stop()
    (host.home / "left-behind").write_text("from an earlier run")
    entry = host.home.stat()
    leftover = subprocess.Popen(
        ["sleep", "300"], user=entry.st_uid, group=entry.st_gid, extra_groups=[], cwd="/", start_new_session=True
    )
    try:
        new = start_ssh_hosts(1)
        assert new.hosts[0].user == host.user, "another harness claimed the user meanwhile"
        assert leftover.wait(timeout=10) == -9
        assert sorted(os.listdir(host.home)) == [".ssh"]
        assert (host.home / ".ssh" / "authorized_keys").stat().st_mode & 0o777 == 0o600
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
