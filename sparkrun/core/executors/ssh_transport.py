"""Running the remote agent on one host through the system OpenSSH client.

``ssh -o BatchMode=yes`` uses the user's ``~/.ssh/config``, agent and
known_hosts as they are, and never prompts: a question ssh would ask
becomes a clear error instead (an unknown host key above all, which is never
accepted silently). One master connection per host is kept open
(``ControlMaster``/``ControlPersist``, its socket in a private directory), so
every later call, from this process or the next command, skips the
handshake. The agent's code goes over stdin with each call: nothing is
installed on the host and nothing is left behind but the workload's record
and log.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.util
import json
import os
import shlex
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sparkrun.core.executors.inventory import HostEntry, SshOptions
from sparkrun.errors import HostError

__all__ = ["SshTransport", "control_directory"]

_AGENT_MODULES = (
    "sparkrun.core.processes",
    "sparkrun.core.log_tail",
    "sparkrun.core.readiness",
    "sparkrun.core.executors.remote_agent",
)
# Registers the modules sent on stdin under their own names, then serves the request that follows them.
_BOOTSTRAP = """\
import json, sys, types
stdin = sys.stdin.buffer
for name, source in json.loads(stdin.read(int(stdin.readline()))):
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        prefix = ".".join(parts[:depth])
        if prefix not in sys.modules:
            sys.modules[prefix] = types.ModuleType(prefix)
            if depth > 1:
                setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], sys.modules[prefix])
    exec(compile(source, name.replace(".", "/") + ".py", "exec"), sys.modules[name].__dict__)
sys.modules[name].main(stdin, sys.stdout.buffer)
"""
_NO_PYTHON = "sparkrun: python3 is not installed on this host"
REMOTE_COMMAND = (
    f"command -v python3 >/dev/null 2>&1 || {{ echo '{_NO_PYTHON}' >&2; exit 127; }}; "
    f"exec python3 -I -S -c {shlex.quote(_BOOTSTRAP)}"  # isolated, no site: the standard library is all it uses
)
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


@functools.cache
def _payload() -> bytes:
    modules = []
    for name in _AGENT_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"cannot find the source of {name}")
        modules.append([name, Path(spec.origin).read_text(encoding="utf-8")])
    data = json.dumps(modules).encode()
    return f"{len(data)}\n".encode() + data


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


class SshTransport:
    """The ssh command line for one host, its master connection, and agent calls over it."""

    def __init__(self, entry: HostEntry, state_dir: Path, options: SshOptions) -> None:
        self.entry = entry
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

    def argv(self, *remote: str) -> list[str]:
        """An ssh command running ``remote`` over the master connection (when connections are reused)."""
        reuse = ["-o", "ControlMaster=no", "-o", f"ControlPath={self._socket}"] if self.options.control_persist else []
        return ["ssh", *self._options(), *reuse, self.entry.name, *remote]

    def ensure_master(self) -> None:
        """Start the host's master connection unless one is up; an ssh failure here names its cause."""
        if not self.options.control_persist:
            return
        with self._lock:
            if self._master_ready:
                return
            if not self._socket.is_socket():  # an existing socket is used as is: a dead one costs one direct login
                with open(f"{self._socket}.lock", "w") as lock:
                    fcntl.flock(lock, fcntl.LOCK_EX)  # one master per host, whichever process gets here first
                    if not self._master_alive():
                        self._start_master()
            self._master_ready = True

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
                raise self._error(f"Connection timed out after {self.options.connect_timeout + 10} s", 255) from None
            if done.returncode != 0:
                stderr.seek(0)
                raise self._error(stderr.read().decode(errors="replace"), done.returncode)

    def close(self) -> None:
        """Ask the master connection to exit (the next call starts a new one)."""
        if self.options.control_persist:
            subprocess.run(
                ["ssh", "-o", f"ControlPath={self._socket}", "-O", "exit", self.entry.name],
                capture_output=True,
                timeout=10,
            )
            self._master_ready = False

    def call(self, request: dict[str, Any], *, timeout: float = 60.0) -> Any:
        """Run one agent request and return its result; any failure is a :class:`HostError` naming the host."""
        self.ensure_master()
        data = _payload() + json.dumps(request).encode() + b"\n"
        try:
            done = subprocess.run(self.argv(REMOTE_COMMAND), input=data, capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HostError(
                f"host {self.entry.name} did not answer within {timeout:g} s (action={request['action']})",
                host=self.entry.name,
                kind="timeout",
            ) from None
        messages = [json.loads(line) for line in done.stdout.splitlines() if line.startswith(b"{")]
        return self._outcome(messages, done.returncode, done.stderr.decode(errors="replace"))

    def stream(self, request: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Run one agent request, yielding its messages as they arrive; the last one is its result.

        Closing the generator (or an exception in the caller) closes the
        connection's stdin, which tells the agent to stop listening.
        """
        self.ensure_master()
        process = subprocess.Popen(
            self.argv(REMOTE_COMMAND), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert process.stdin is not None and process.stdout is not None and process.stderr is not None
        try:
            process.stdin.write(_payload() + json.dumps(request).encode() + b"\n")
            process.stdin.flush()
            last: dict[str, Any] = {}
            for line in process.stdout:
                message = json.loads(line)
                if "result" in message or "error" in message:
                    last = message
                    break
                yield message
            process.stdin.close()
            stderr = process.stderr.read().decode(errors="replace")
            code = process.wait(timeout=10)
            yield {"result": self._outcome([last] if last else [], code, stderr)}
        finally:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)
            for pipe in (process.stdin, process.stdout, process.stderr):
                pipe.close()

    def _outcome(self, messages: list[dict[str, Any]], code: int, stderr: str) -> Any:
        final = messages[-1] if messages else {}
        if "result" in final:
            return final["result"]
        if "error" in final:
            raise HostError(f"{self.entry.name}: {final['error']}", host=self.entry.name, kind=final.get("kind", ""))
        raise self._error(stderr, code)

    def _error(self, stderr: str, code: int) -> HostError:
        """What an ssh failure means for the user, from its stderr (ssh says why on its last lines)."""
        entry, name = self.entry, self.entry.name
        where = f"{entry.address or name}:{entry.port or 22}"
        lines = [line.strip() for line in stderr.splitlines() if line.strip() and not line.startswith("Warning:")]
        last = lines[-1] if lines else f"ssh exited with code {code} and said nothing"
        if _NO_PYTHON in stderr:
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
