"""Real OpenSSH servers on loopback, one unix user each, for the SSH executor's tests and benchmark.

Each host is an ``sshd -D`` of its own on ``127.0.0.<n+1>`` (Linux routes all of 127/8 to ``lo``), with its
own host key and its own user ``sparkrun-h<n>`` whose home lives under :data:`HOMES_ROOT`, so files and
processes on one host are really invisible from another. A session makes one client key pair that every
user authorizes, a second one that nobody does, and a ``known_hosts`` file naming every host's key.

Nothing outside loopback is contacted. It needs root (``useradd``, ``chown``, killing the users'
processes, binding sshd's privilege separation) and ``/usr/sbin/sshd`` (``make sshd``). Stdlib only, so
``benchmarks/`` can import it with the repository root on ``sys.path``::

    with SshHosts(4) as hosts:
        subprocess.run(hosts.hosts[0].ssh_argv("id", "-un"), check=True)

Users are claimed with a lock file each (:data:`HOMES_ROOT` ``/<user>.lock``): two harnesses, in one
process or in concurrent test runs, take different users and never kill each other's processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, NoReturn

__all__ = ["HOMES_ROOT", "SSHD", "SshHost", "SshHosts"]

#: The fixed root of the test users' homes: outside /tmp so StrictModes' checks of the home pass.
HOMES_ROOT = Path("/var/tmp/sparkrun-test-hosts")
#: Debian's OpenSSH server (package ``openssh-server``).
SSHD = Path("/usr/sbin/sshd")

_USER_PREFIX = "sparkrun-h"
# 127.0.0.2 ... 127.0.0.33: enough for any test, and a run with leaked locks still finds a free one.
_MAX_USERS = 32
_READY_TIMEOUT = 10.0
_STOP_TIMEOUT = 5.0
# sshd's privilege separation directory; Debian's init script creates it, a container has none.
_PRIVSEP_DIR = Path("/run/sshd")


@dataclass(frozen=True)
class SshHost:
    """One running test host, as a client (and an inventory) sees it."""

    name: str  # inventory name: "spark-1", "spark-2", ...
    address: str  # "127.0.0.2", ...
    port: int
    user: str  # "sparkrun-h1", ...
    home: Path
    identity_file: Path  # the authorized client private key
    known_hosts_file: Path  # every host of the session

    def inventory(self) -> dict[str, object]:
        """This host as an entry of a config's ``hosts:`` mapping (plain str/int, ready for YAML or JSON)."""
        return {
            "address": self.address,
            "user": self.user,
            "port": self.port,
            "identity_file": str(self.identity_file),
            "known_hosts_file": str(self.known_hosts_file),
        }

    def ssh_argv(
        self,
        *remote: str,
        identity_file: Path | None = None,
        known_hosts_file: Path | None = None,
        options: Mapping[str, str] | None = None,
    ) -> list[str]:
        """A non-interactive ``ssh`` command to this host, ignoring every ssh config, agent and known host
        of the machine, so a test can look at the remote side (``ssh_argv("ls", "-A")``).

        As with ``ssh`` itself, ``remote`` is joined with spaces and run by the user's shell. The keyword
        arguments swap in another key or known_hosts file (for the tests of a refusal) and add ``-o``
        options, which win over the defaults here (ssh keeps an option's first value), e.g.
        ``{"ControlMaster": "yes", "ControlPath": ...}``.
        """
        extra = [arg for key, value in (options or {}).items() for arg in ("-o", f"{key}={value}")]
        return [
            "ssh",
            "-F",
            "none",
            *extra,
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "IdentityAgent=none",
            "-o",
            f"IdentityFile={identity_file or self.identity_file}",
            "-o",
            f"UserKnownHostsFile={known_hosts_file or self.known_hosts_file}",
            "-o",
            "GlobalKnownHostsFile=/dev/null",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "ControlMaster=no",
            "-o",
            "ControlPath=none",
            "-o",
            "ConnectTimeout=5",
            "-p",
            str(self.port),
            "-l",
            self.user,
            self.address,
            *remote,
        ]


@dataclass
class _Server:
    """What the harness keeps about a host it started: the sshd process, its files, its user's claim."""

    host: SshHost
    uid: int
    directory: Path  # config, host key, pid file and log
    lock: IO[str]
    process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.directory / "sshd.log"


class SshHosts:
    """Starts ``count`` hosts (more with :meth:`ensure`) and stops them all; a context manager.

    ``workdir`` holds the session's keys, configs and logs; by default a temporary directory, removed
    on :meth:`stop`. A host that cannot start raises RuntimeError with the tail of its sshd log.
    """

    def __init__(self, count: int = 2, *, workdir: Path | None = None) -> None:
        self._count = count
        self._own_workdir = workdir is None
        self._workdir = workdir
        self._servers: list[_Server] = []
        self._started = False

    # -- the public surface -----------------------------------------------------------------------

    @property
    def hosts(self) -> list[SshHost]:
        """Every running host, in start order (``spark-1`` first)."""
        return [server.host for server in self._servers]

    @property
    def identity_file(self) -> Path:
        """The client private key every host's user authorizes."""
        return self._dir / "id_ed25519"

    @property
    def wrong_identity_file(self) -> Path:
        """A valid private key that no host authorizes, for the tests of a refused key."""
        return self._dir / "wrong_ed25519"

    @property
    def known_hosts_file(self) -> Path:
        """``[address]:port ssh-ed25519 ...`` for every running host."""
        return self._dir / "known_hosts"

    def start(self) -> SshHosts:
        """Make the session's keys and start the first ``count`` hosts; returns ``self``."""
        if self._started:
            raise RuntimeError("SSH test hosts already started")
        if not SSHD.exists():
            raise RuntimeError(f"{SSHD} is missing: run `make sshd` (Debian's openssh-server)")
        if os.geteuid() != 0:
            raise RuntimeError("the SSH test hosts need root: they create users and run sshd")
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="sparkrun-ssh-hosts-"))
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._started = True
        try:
            _keygen(self.identity_file, "sparkrun-test-client")
            _keygen(self.wrong_identity_file, "sparkrun-test-wrong")
            self._write_known_hosts(self.known_hosts_file, [])
            self.ensure(self._count)
        except BaseException:
            self.stop()
            raise
        return self

    def ensure(self, count: int) -> list[SshHost]:
        """The first ``count`` hosts, starting the missing ones: lets a test ask for more hosts than the
        session's fixture started, without a second set of users."""
        if not self._started:
            raise RuntimeError("SSH test hosts not started")
        running = len(self._servers)
        try:
            for _ in range(count - running):
                self._prepare(len(self._servers) + 1)
            added = self._servers[running:]
            # Every key in known_hosts before any client can reach a new host; then all start at once.
            self._write_known_hosts(self.known_hosts_file, self.hosts)
            for server in added:
                self._spawn(server)
            for server in added:
                self._wait_ready(server)
        except BaseException:
            # The hosts already running stay as they were; the new ones are stopped and forgotten.
            added, self._servers = self._servers[running:], self._servers[:running]
            for server in added:
                with contextlib.suppress(Exception):
                    _stop_server(server)
            with contextlib.suppress(OSError):
                self._write_known_hosts(self.known_hosts_file, self.hosts)
            raise
        return self.hosts[:count]

    def stop(self) -> None:
        """Stop every sshd, kill whatever its user still runs (sessions, workloads), release the users.

        Safe to call twice. The homes are kept (the next start wipes them) so a failure can be examined.
        """
        servers, self._servers = self._servers, []
        errors: list[str] = []
        for server in reversed(servers):
            try:
                _stop_server(server)
            except Exception as error:  # one host's failure must not leave the others running
                errors.append(f"{server.host.name}: {error}")
        if self._own_workdir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
        self._started = False
        if errors:
            raise RuntimeError("could not stop every SSH test host: " + "; ".join(errors))

    def known_hosts_without(self, host: SshHost) -> Path:
        """A known_hosts file naming every running host but ``host``: a client must refuse to talk to it."""
        path = self._dir / f"known_hosts-without-{host.name}"
        self._write_known_hosts(path, [other for other in self.hosts if other != host])
        return path

    def log_tail(self, host: SshHost, lines: int = 40) -> str:
        """The last lines of ``host``'s sshd log (LogLevel INFO), to show why a connection failed."""
        return _tail(self._server(host).log_path, lines)

    def sshd_pid(self, host: SshHost) -> int | None:
        """The pid of ``host``'s listening sshd, None once stopped."""
        process = self._server(host).process
        return process.pid if process is not None and process.poll() is None else None

    def inventory(self, hosts: Iterable[SshHost] | None = None) -> dict[str, dict[str, object]]:
        """A config's ``hosts:`` mapping, by inventory name, for ``hosts`` (default: every running host)."""
        return {host.name: host.inventory() for host in (self.hosts if hosts is None else hosts)}

    def __enter__(self) -> SshHosts:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    # -- starting one host ------------------------------------------------------------------------

    @property
    def _dir(self) -> Path:
        if self._workdir is None:
            raise RuntimeError("SSH test hosts not started")
        return self._workdir

    def _server(self, host: SshHost) -> _Server:
        for server in self._servers:
            if server.host == host:
                return server
        raise KeyError(f"{host.name} is not a running host of this harness")

    def _prepare(self, number: int) -> _Server:
        """Claim a free user, give it a clean home that authorizes the client key, write its sshd files."""
        index, lock = _claim_user()
        user = f"{_USER_PREFIX}{index}"
        home = HOMES_ROOT / user
        try:
            _kill_stale_listener(lock)
            uid, gid = _ensure_user(user, home)
            _kill_user_processes(uid)
            _reset_home(home, uid, gid, Path(f"{self.identity_file}.pub").read_text())
            directory = self._dir / user
            directory.mkdir(exist_ok=True)
            _keygen(directory / "ssh_host_ed25519_key", f"{user}-host")
            address = f"127.0.0.{index + 1}"
            host = SshHost(
                name=f"spark-{number}",
                address=address,
                port=_free_port(address),
                user=user,
                home=home,
                identity_file=self.identity_file,
                known_hosts_file=self.known_hosts_file,
            )
        except BaseException:
            lock.close()
            raise
        server = _Server(host=host, uid=uid, directory=directory, lock=lock)
        self._servers.append(server)
        return server

    def _spawn(self, server: _Server) -> None:
        config = server.directory / "sshd_config"
        config.write_text(_sshd_config(server))
        _PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
        # A file rather than a pipe: nobody drains a pipe, and a full one would stall sshd.
        with open(server.log_path, "ab") as log:
            server.process = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        # Recorded under the user's lock, so a run killed before its stop() has its sshd killed next time.
        server.lock.seek(0)
        server.lock.truncate()
        server.lock.write(f"{server.process.pid}\n{config}\n")
        server.lock.flush()

    def _wait_ready(self, server: _Server) -> None:
        """Wait for sshd's banner on its port: listening alone could still be a half-started process."""
        host, process = server.host, server.process
        assert process is not None
        deadline = time.monotonic() + _READY_TIMEOUT
        while True:
            returncode = process.poll()
            if returncode is not None:
                self._fail(server, f"sshd of {host.name} exited with code {returncode} before it was ready")
            if _banner(host.address, host.port):
                return
            if time.monotonic() > deadline:
                self._fail(
                    server, f"sshd of {host.name} sent no banner on {host.address}:{host.port} in {_READY_TIMEOUT} s"
                )
            time.sleep(0.02)

    def _fail(self, server: _Server, reason: str) -> NoReturn:
        tail = _tail(server.log_path, 20)
        raise RuntimeError(f"{reason}; last lines of its log ({server.log_path}):\n{tail}")

    def _write_known_hosts(self, path: Path, hosts: Iterable[SshHost]) -> None:
        lines = []
        for host in hosts:
            key_type, key = (self._dir / host.user / "ssh_host_ed25519_key.pub").read_text().split()[:2]
            lines.append(f"[{host.address}]:{host.port} {key_type} {key}\n")
        path.write_text("".join(lines))


# -- helpers: users, homes, processes -------------------------------------------------------------


def _claim_user() -> tuple[int, IO[str]]:
    """The lowest user index nobody else holds, with its lock held (released when the file is closed)."""
    HOMES_ROOT.mkdir(parents=True, exist_ok=True)
    HOMES_ROOT.chmod(0o755)  # StrictModes refuses a home below a group- or world-writable directory
    for index in range(1, _MAX_USERS + 1):
        lock = open(HOMES_ROOT / f"{_USER_PREFIX}{index}.lock", "a+")  # noqa: SIM115 - kept open while claimed
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            continue
        return index, lock
    raise RuntimeError(f"all {_MAX_USERS} SSH test users are in use (locks under {HOMES_ROOT})")


def _kill_stale_listener(lock: IO[str]) -> None:
    """Kill the sshd a previous, killed run recorded under this lock, if it is still that sshd."""
    lock.seek(0)
    recorded = lock.read().split("\n")
    if len(recorded) < 2 or not recorded[0].isdigit():
        return
    pid, config = int(recorded[0]), recorded[1]
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return
    # sshd retitles itself ("sshd: /usr/sbin/sshd -D -e -f CONFIG [listener] ..."): match the text, not argv.
    if b"sshd" in cmdline and config.encode() in cmdline:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _ensure_user(user: str, home: Path) -> tuple[int, int]:
    """Create ``user`` (shell /bin/sh, home ``home``) or repair it; returns its uid and gid.

    Its password is ``*`` (no password, but not ``!``, locked: without PAM, sshd refuses a locked account).
    """
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        _run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", str(home),
              "--shell", "/bin/sh", "--password", "*", user])  # fmt: skip
        entry = pwd.getpwnam(user)
    else:
        if entry.pw_dir != str(home) or entry.pw_shell != "/bin/sh" or _shadow_password(user).startswith("!"):
            _run(["usermod", "--home", str(home), "--shell", "/bin/sh", "--password", "*", user])
            entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid


def _shadow_password(user: str) -> str:
    for line in Path("/etc/shadow").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user and len(fields) > 1:
            return fields[1]
    return ""


def _reset_home(home: Path, uid: int, gid: int, authorized_key: str) -> None:
    """Empty ``home`` and give it only ``.ssh/authorized_keys``, with the modes StrictModes demands."""
    if home.is_symlink() or (home.exists() and not home.is_dir()):
        home.unlink()
    home.mkdir(mode=0o700, exist_ok=True)
    for entry in home.iterdir():
        # rmtree never follows the links a workload may have left; a link itself is just unlinked.
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    ssh_dir = home / ".ssh"
    ssh_dir.mkdir(mode=0o700)
    authorized = ssh_dir / "authorized_keys"
    authorized.write_text(authorized_key)
    authorized.chmod(0o600)
    for path in (home, ssh_dir, authorized):
        os.chown(path, uid, gid)
    home.chmod(0o700)


def _processes() -> Iterable[tuple[int, int, set[int]]]:
    """``(pid, ppid, {real uid, effective uid})`` of every live process; zombies are left out."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("State", "").strip().startswith("Z"):
            continue
        uids = fields.get("Uid", "").split()
        yield int(entry.name), int(fields.get("PPid", "0")), {int(uid) for uid in uids[:2]}


def _descendants(pid: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for child, parent, _ in _processes():
        children.setdefault(parent, []).append(child)
    found: set[int] = set()
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


def _kill_user_processes(uid: int, also: Iterable[int] = ()) -> None:
    """SIGKILL every process of ``uid`` (and the pids in ``also``) until none is left.

    What ``pkill -KILL -u`` does, repeated: a process forked between a scan and the kill is caught by
    the next scan. Reading /proc also spares a fresh machine the procps package.
    """
    extra = set(also)
    deadline = time.monotonic() + _STOP_TIMEOUT
    while True:
        targets = [pid for pid, _, uids in _processes() if uid in uids or pid in extra]
        if not targets:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes {sorted(targets)} (uid {uid}) survived SIGKILL for {_STOP_TIMEOUT} s")
        for pid in targets:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _stop_server(server: _Server) -> None:
    """Stop one host: no new connections, then every session (root monitors included) and user process."""
    process = server.process
    try:
        if process is not None and process.poll() is None:
            # Frozen first, so no connection is accepted between listing its sessions and killing them.
            process.send_signal(signal.SIGSTOP)
            _kill_user_processes(server.uid, also=_descendants(process.pid))
            process.send_signal(signal.SIGTERM)
            process.send_signal(signal.SIGCONT)
            try:
                process.wait(timeout=_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        else:
            _kill_user_processes(server.uid)
    finally:
        server.lock.close()


# -- helpers: keys, ports, sshd -------------------------------------------------------------------


def _keygen(path: Path, comment: str) -> None:
    """An ed25519 key pair without a passphrase at ``path`` and ``path.pub``, replacing any older one."""
    path.unlink(missing_ok=True)  # ssh-keygen would ask before overwriting, and there is nobody to answer
    Path(f"{path}.pub").unlink(missing_ok=True)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((address, 0))
        port: int = sock.getsockname()[1]
        return port


def _banner(address: str, port: int) -> bool:
    """True once a connection to ``address:port`` reads an SSH version line.

    sshd logs the probe as ``kex_exchange_identification: Connection closed by remote host``: harmless.
    """
    try:
        with socket.create_connection((address, port), timeout=1) as sock:
            return sock.makefile("rb").readline(256).startswith(b"SSH-")
    except OSError:
        return False


def _sshd_config(server: _Server) -> str:
    """Key-only logins for this host's user alone, sized for multiplexed parallel sessions."""
    host = server.host
    return (
        f"ListenAddress {host.address}:{host.port}\n"
        f"HostKey {server.directory / 'ssh_host_ed25519_key'}\n"
        f"PidFile {server.directory / 'sshd.pid'}\n"
        f"AllowUsers {host.user}\n"
        "AuthorizedKeysFile .ssh/authorized_keys\n"
        "PubkeyAuthentication yes\n"
        "PasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\n"
        "UsePAM no\n"
        "PermitRootLogin no\n"
        "StrictModes yes\n"
        # A ControlMaster runs every session of ~10 parallel commands over one connection.
        "MaxSessions 64\n"
        "MaxStartups 64:30:128\n"
        "PrintMotd no\n"
        "PrintLastLog no\n"
        "X11Forwarding no\n"
        # scp speaks SFTP since OpenSSH 9.0.
        "Subsystem sftp internal-sftp\n"
        "LogLevel INFO\n"
    )


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed with code {done.returncode}: {done.stderr.strip()}")


def _tail(path: Path, lines: int) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as error:
        return f"(no log: {error})"
