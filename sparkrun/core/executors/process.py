"""The ``process`` executor: a workload as a detached local process group.

The workload runs in its own session (so it outlives the CLI and a stop can
signal the whole group), with stdout and stderr appended to its log file.
"""

from __future__ import annotations

import errno
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path

from sparkrun.core import log_tail
from sparkrun.core.processes import MARKER_VARIABLE, ProcessIdentity, new_marker, signal_group
from sparkrun.core.recipes import Readiness
from sparkrun.errors import DeploymentError, LaunchError

__all__ = ["ProcessExecutor"]

_POLL_SECONDS = 0.1
_children: dict[int, subprocess.Popen[bytes]] = {}  # reaped by whoever checks them; keeps Popen quiet


class ProcessExecutor:
    """Starts, checks and stops workloads on this machine."""

    def argv(self, command: str) -> list[str]:
        """Split a rendered command, checking that its program exists."""
        try:
            argv = shlex.split(command)
        except ValueError as error:
            raise LaunchError(f"command cannot be parsed: {error} (command={command!r})") from None
        if not argv:
            raise LaunchError("command is empty after filling its placeholders")
        program = argv[0]
        if shutil.which(program) is None:
            raise LaunchError(f"command not found (command={program!r}, PATH has no such program)")
        return argv

    def check_port_free(self, port: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise LaunchError(f"port is already in use (port={port})") from None
                raise LaunchError(f"port cannot be used (port={port}, {error.strerror})") from None

    def start(self, argv: list[str], *, env: Mapping[str, str], cwd: Path, log_path: Path) -> ProcessIdentity:
        """Start the workload detached; returns what proves later that a pid is still this workload.

        The log starts empty: it holds this run only (and so does the tail
        quoted when the run fails); a previous run's log is replaced.
        """
        log_path.parent.mkdir(parents=True, exist_ok=True)
        marker = new_marker()
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env={**os.environ, **env, MARKER_VARIABLE: marker},
                start_new_session=True,
            )
        _children[popen.pid] = popen
        return ProcessIdentity.of(popen.pid, marker=marker)

    def _exit_code(self, pid: int) -> int | None:
        popen = _children.get(pid)
        return popen.poll() if popen is not None else None

    def wait_ready(
        self,
        identity: ProcessIdentity,
        *,
        port: int,
        readiness: Readiness,
        log_path: Path,
        on_step: Callable[[int, int, str], None],
    ) -> None:
        """Wait until the port accepts connections and the HTTP check answers 2xx.

        Raises :class:`LaunchError` with the exit code and the last log lines if
        the workload exits first, or after ``readiness.timeout`` seconds.
        """
        pid = identity.pid
        total = 2 if readiness.http_path else 1
        deadline = time.monotonic() + readiness.timeout
        on_step(1, total, f"waiting for port {port}")
        stage = "port"
        while time.monotonic() < deadline:
            code = self._exit_code(pid)
            if code is not None or not identity.matches():
                tail = "\n".join(log_tail.tail(log_path, 10)[0]) or "(the log is empty)"
                raise LaunchError(
                    f"workload exited during startup with code {code} (pid={pid}); last log lines:\n{tail}"
                )
            if stage == "port" and self._port_open(port):
                if readiness.http_path is None:
                    return
                stage = "http"
                on_step(2, total, f"waiting for HTTP GET {readiness.http_path}")
            if stage == "http" and self._http_ok(port, readiness.http_path or "/"):
                return
            time.sleep(_POLL_SECONDS)
        waiting = "waiting for the port" if stage == "port" else "failing the HTTP check"
        raise LaunchError(
            f"workload not ready within {readiness.timeout:g} s, still {waiting} "
            f"(readiness.timeout={readiness.timeout:g}, port={port})"
        )

    @staticmethod
    def _port_open(port: int) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            return False

    @staticmethod
    def _http_ok(port: int, path: str) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
                status: int = response.status
                return 200 <= status < 300
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, identity: ProcessIdentity, *, grace: float = 5.0) -> str:
        """End the workload's process group: SIGTERM, then SIGKILL after ``grace`` seconds.

        Returns how it ended: ``terminated``, ``killed`` or ``already exited``.
        Only a process that still proves to be the workload is signalled.
        """
        if not identity.matches():
            _children.pop(identity.pid, None)
            return "already exited"
        outcome = "terminated"
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not signal_group(identity, sig):
                if identity.matches():
                    raise DeploymentError(
                        f"cannot signal the workload: it no longer leads its own process group (pid={identity.pid})"
                    )
                break
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and identity.matches():
                time.sleep(_POLL_SECONDS)
            if not identity.matches():
                break
            outcome = "killed"
        popen = _children.pop(identity.pid, None)
        if popen is not None:
            popen.wait(timeout=5)  # reap our own child so no zombie lingers in its group
        return outcome
