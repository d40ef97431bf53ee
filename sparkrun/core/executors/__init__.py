"""Executors start, watch and stop workloads on a host.

Only the local ``process`` executor exists today; :func:`executor_for`
refuses remote hosts with a clear message so an SSH executor can slot in
behind the same interface later.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from sparkrun.core.executors.process import ProcessExecutor
from sparkrun.core.processes import ProcessIdentity
from sparkrun.core.recipes import Readiness
from sparkrun.errors import LaunchError

__all__ = ["Executor", "ProcessExecutor", "executor_for", "is_local_host"]


class Executor(Protocol):
    """What the launch pipeline needs from a host; an SSH executor implements the same."""

    def argv(self, command: str) -> list[str]: ...

    def check_port_free(self, port: int) -> None: ...

    def start(self, argv: list[str], *, env: Mapping[str, str], cwd: Path, log_path: Path) -> ProcessIdentity: ...

    def wait_ready(
        self,
        identity: ProcessIdentity,
        *,
        port: int,
        readiness: Readiness,
        log_path: Path,
        on_step: Callable[[int, int, str], None],
    ) -> None: ...

    def stop(self, identity: ProcessIdentity, *, grace: float = 5.0) -> str: ...


_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_local_host(host: str) -> bool:
    return host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn())


def executor_for(host: str) -> Executor:
    """The executor that can run workloads on ``host``."""
    if not is_local_host(host):
        raise LaunchError(f"remote hosts are not supported yet; only localhost runs workloads (host={host})")
    return ProcessExecutor()
