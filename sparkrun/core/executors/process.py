"""The ``process`` executor: a workload as a detached local process group.

The workload runs in its own session (so it outlives the CLI and a stop can
signal the whole group), with stdout and stderr in its log file.
"""

from __future__ import annotations

import contextlib
import errno
import shlex
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sparkrun.core import log_tail
from sparkrun.core.deployments import Placement
from sparkrun.core.processes import spawn_detached, terminate_group
from sparkrun.core.readiness import NotReady, wait_ready
from sparkrun.errors import DeploymentError, LaunchError

if TYPE_CHECKING:
    from sparkrun.core.executors import LaunchSpec

__all__ = ["ProcessExecutor", "split_command"]

_children: dict[int, subprocess.Popen[bytes]] = {}  # reaped by whoever checks them; keeps Popen quiet


def split_command(command: str) -> list[str]:
    """A rendered command as argv; an unparsable or empty one is an error quoting it."""
    try:
        argv = shlex.split(command)
    except ValueError as error:
        raise LaunchError(f"command cannot be parsed: {error} (command={command!r})") from None
    if not argv:
        raise LaunchError("command is empty after filling its placeholders")
    return argv


class ProcessExecutor:
    """Starts, checks and stops workloads on this machine."""

    address = "127.0.0.1"
    python = sys.executable

    def __init__(self, host: str = "localhost") -> None:
        self.host = host

    def argv(self, command: str) -> list[str]:
        """Split a rendered command, checking that its program exists."""
        argv = split_command(command)
        if shutil.which(argv[0]) is None:
            raise LaunchError(f"command not found (command={argv[0]!r}, PATH has no such program)")
        return argv

    def check_port_free(self, port: int) -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind(("0.0.0.0", port))
            except OSError as error:
                if error.errno == errno.EADDRINUSE:
                    raise LaunchError(f"port is already in use (port={port})") from None
                raise LaunchError(f"port cannot be used (port={port}, {error.strerror})") from None

    def launch(self, spec: LaunchSpec) -> Placement:
        """Start the workload detached and wait until ready; if it is not, stop it and raise :class:`LaunchError`.

        The log starts empty: it holds this run only (and so does the tail
        quoted when the run fails); a previous run's log is replaced.
        """
        spec.log_path.parent.mkdir(parents=True, exist_ok=True)
        popen, identity = spawn_detached(spec.argv, env=spec.env, cwd=str(spec.cwd), log_path=spec.log_path)
        _children[popen.pid] = popen
        placement = Placement.started(
            self.host, identity, log_path=str(spec.log_path), url=f"http://{self.address}:{spec.port}"
        )
        spec.on_started(placement)

        def exited() -> str | None:
            code = popen.poll()
            if spec.cancelled():
                return "the launch was interrupted"
            if code is None and identity.matches():
                return None
            tail = "\n".join(log_tail.tail(spec.log_path, 10)[0]) or "(the log is empty)"
            return f"workload exited during startup with code {code} (pid={popen.pid}); last log lines:\n{tail}"

        try:
            wait_ready(
                address=self.address,
                port=spec.port,
                http_path=spec.readiness.http_path,
                timeout=spec.readiness.timeout,
                exited=exited,
                on_step=spec.on_step,
            )
        except BaseException as error:  # not ready, or interrupted (Ctrl+C): leave nothing unrecorded behind
            self.stop(placement, grace=2.0)
            if isinstance(error, NotReady):
                raise LaunchError(str(error)) from None
            raise
        return placement

    def alive(self, placement: Placement) -> bool:
        return placement.identity.matches()

    def stop(self, placement: Placement, *, grace: float = 5.0) -> str:
        """End the workload's process group: SIGTERM, then SIGKILL after ``grace`` seconds.

        Returns how it ended: ``terminated``, ``killed`` or ``already exited``.
        Only a process that still proves to be the workload is signalled.
        """
        outcome = terminate_group(placement.identity, grace=grace)
        if outcome is None:
            raise DeploymentError(
                f"cannot signal the workload: it no longer leads its own process group (pid={placement.pid})"
            )
        popen = _children.pop(placement.pid, None)
        if popen is not None:
            # Reap our own child so no zombie lingers in its group. Its leader can read as gone while other
            # threads still finish (a span flush on SIGTERM): then it is reaped when this process exits.
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.wait(timeout=5)
        return outcome

    def logs(
        self, placement: Placement, *, tail: int | None, follow: bool, cancel: threading.Event | None = None
    ) -> Iterator[str]:
        def running() -> bool:
            return self.alive(placement) and not (cancel is not None and cancel.is_set())

        return log_tail.follow(Path(placement.log_path), running, tail, follow)
