"""Running the remote agent on one host through the system OpenSSH client.

``ssh -o BatchMode=yes`` uses the user's ``~/.ssh/config``, agent and
known_hosts as they are, and never prompts: a question ssh would ask
becomes a clear error instead (an unknown host key above all, which is never
accepted silently). One master connection per host is kept open
(``ControlMaster``/``ControlPersist``, its socket in a private directory), so
every later call, from this process or the next command, skips the
handshake. The agent's code goes over stdin with each call (see
:mod:`~sparkrun.core.executors.agent_transport`): nothing is installed on
the host and nothing is left behind but the workload's record and log.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path

from sparkrun.core.executors.agent_transport import NO_PYTHON, REMOTE_COMMAND, AgentTransport
from sparkrun.core.executors.inventory import HostEntry, SshOptions
from sparkrun.errors import HostError

__all__ = ["SshTransport", "control_directory"]

# A unix socket path holds at most 107 bytes, and ssh binds a temporary name 17 bytes longer first.
_SOCKET_PATH_LIMIT = 90
_UNREACHABLE = (
    "Connection refused",
    "No route to host",
    "Connection timed out",
    "Operation timed out",
    "Could not resolve hostname",
    "Network is unreachable",
    "Connection closed by",
    "Connection reset",
)


def control_directory(state_dir: Path) -> Path:
    """Where master sockets live: ``<state_dir>/ssh``, or a private temporary folder if that path is too long."""
    directory = Path(state_dir) / "ssh"
    if len(str(directory)) + 14 > _SOCKET_PATH_LIMIT:
        digest = hashlib.sha256(str(Path(state_dir).resolve()).encode()).hexdigest()[:12]
        directory = Path(tempfile.gettempdir()) / f"sparkrun-ssh-{os.getuid()}-{digest}"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = directory.lstat()
    if directory.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise HostError(f"the ssh socket directory is not private to this user (path={directory})", host="", kind="ssh")
    return directory


class SshTransport(AgentTransport):
    """The ssh command line for one host, its master connection, and agent calls over it."""

    def __init__(self, entry: HostEntry, state_dir: Path, options: SshOptions) -> None:
        self.entry = entry
        self.host = entry.name
        self.options = options
        self._state_dir = state_dir
        self._lock = threading.Lock()
        self._master_ready = False

    @functools.cached_property
    def _socket(self) -> Path:
        key = json.dumps(self.entry.to_json(), sort_keys=True).encode()
        return control_directory(self._state_dir) / hashlib.sha256(key).hexdigest()[:12]

    def _options(self) -> list[str]:
        entry, argv = self.entry, ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={self.options.connect_timeout}"]
        if entry.address:
            argv += ["-o", f"HostName={entry.address.strip('[]')}"]
        if entry.port:
            argv += ["-p", str(entry.port)]
        if entry.user:
            argv += ["-l", entry.user]
        if entry.identity_file:
            argv += ["-i", entry.identity_file, "-o", "IdentitiesOnly=yes"]
        if entry.known_hosts_file:
            argv += ["-o", f"UserKnownHostsFile={entry.known_hosts_file}"]
        return argv

    def argv(self) -> list[str]:
        """The agent's command over the master connection (when connections are reused)."""
        reuse = ["-o", "ControlMaster=no", "-o", f"ControlPath={self._socket}"] if self.options.control_persist else []
        return ["ssh", *self._options(), *reuse, self.entry.name, REMOTE_COMMAND]

    def ensure_ready(self) -> None:
        """Start the host's master connection unless one is up; an ssh failure here names its cause."""
        if not self.options.control_persist:
            return
        with self._lock:
            if self._master_ready:
                return
            if not self._socket.is_socket():  # an existing socket is used as is; a dead one is noticed on first use
                with open(f"{self._socket}.lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)  # one master per host, whichever process gets here first
                    if not self._master_alive():
                        self._start_master()
            self._master_ready = True

    def noticed(self, stderr: str) -> None:
        """A master that died leaves its socket: ssh then logs in directly, slowly; start a new master next time."""
        if "Control socket connect" in stderr:
            with self._lock:
                self._socket.unlink(missing_ok=True)
                self._master_ready = False

    def _master_alive(self) -> bool:
        check = subprocess.run(
            ["ssh", *self._options(), "-o", f"ControlPath={self._socket}", "-O", "check", self.entry.name],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
        )
        return check.returncode == 0

    def _start_master(self) -> None:
        self._socket.unlink(missing_ok=True)  # a master that died leaves its socket behind
        argv = [
            "ssh",
            *self._options(),
            "-o",
            "ControlMaster=yes",
            "-o",
            f"ControlPersist={self.options.control_persist}",
            "-o",
            f"ControlPath={self._socket}",
            "-f",
            "-N",
            self.entry.name,
        ]
        # The master keeps the stderr it was given for its whole life: a file, so nobody waits on a pipe.
        with tempfile.TemporaryFile() as stderr:
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    timeout=self.options.connect_timeout + 10,
                )
            except subprocess.TimeoutExpired:
                raise self.failure(f"Connection timed out after {self.options.connect_timeout + 10} s", 255) from None
            if done.returncode != 0:
                stderr.seek(0)
                raise self.failure(stderr.read().decode(errors="replace"), done.returncode)

    def close(self) -> None:
        """Ask the master connection to exit (the next call starts a new one)."""
        if self.options.control_persist:
            subprocess.run(
                ["ssh", "-o", f"ControlPath={self._socket}", "-O", "exit", self.entry.name],
                capture_output=True,
                timeout=10,
            )
            self._master_ready = False

    def failure(self, stderr: str, code: int) -> HostError:
        """What an ssh failure means for the user, from its stderr (ssh says why on its last lines)."""
        entry, name = self.entry, self.entry.name
        where = f"{entry.address or name}:{entry.port or 22}"
        lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("Warning:")]
        last = lines[-1] if lines else f"ssh exited with code {code} and said nothing"
        if NO_PYTHON in stderr:
            return HostError(
                f"{name}: python3 is not installed on the host; sparkrun needs only python3 (3.8 or newer) "
                "and a POSIX shell there",
                host=name,
                kind="python_missing",
            )
        if "Host key verification failed" in stderr or "HOST IDENTIFICATION HAS CHANGED" in stderr:
            known = entry.known_hosts_file or "~/.ssh/known_hosts"
            port = f"-p {entry.port} " if entry.port else ""
            return HostError(
                f"{name}: the host key of {where} is not in {known} (or has changed); sparkrun never accepts "
                f"a host key on its own. Check the key with the host's owner, then accept it with "
                f"`ssh-keyscan {port}{entry.address or name} >> {known}` (or connect once with `ssh {name}`)",
                host=name,
                kind="host_key",
            )
        if "Permission denied" in stderr or "Too many authentication failures" in stderr:
            key = entry.identity_file or "your ssh agent and default keys"
            return HostError(
                f"{name}: authentication refused for user {entry.user or '(from your ssh config)'} at {where} "
                f"(identity_file={key}): {last}",
                host=name,
                kind="auth",
            )
        if any(marker in stderr for marker in _UNREACHABLE):
            return HostError(f"{name}: host unreachable at {where}: {last}", host=name, kind="unreachable")
        return HostError(f"{name}: ssh failed with exit code {code}: {last}", host=name, kind="ssh")
