"""Executors start, watch and stop workloads on a host.

Only the local ``process`` executor exists today; :func:`executor_for`
refuses remote hosts with a clear message so an SSH executor can slot in
behind the same interface later.
"""

from __future__ import annotations

import socket

from sparkrun.core.executors.process import ProcessExecutor
from sparkrun.errors import LaunchError

__all__ = ["ProcessExecutor", "executor_for", "is_local_host"]

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_local_host(host: str) -> bool:
    return host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn())


def executor_for(host: str) -> ProcessExecutor:
    """The executor that can run workloads on ``host``."""
    if not is_local_host(host):
        raise LaunchError(f"remote hosts are not supported yet; only localhost runs workloads (host={host})")
    return ProcessExecutor()
