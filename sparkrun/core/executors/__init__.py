"""Executors start, watch and stop workloads on a host.

``localhost`` (and this machine's own names) run through the local
``process`` executor; every other host through the ``ssh`` executor, with
the inventory of the configuration file saying how to reach it.
:class:`Executors` hands out one executor per host for a configuration (so
each SSH host keeps one master connection) and fans calls out to several
hosts in parallel, with a bound.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypeVar

from sparkrun.config import Config
from sparkrun.core.deployments import Deployment, Placement
from sparkrun.core.executors.inventory import HostEntry, check_host_name, read_inventory, read_ssh_options
from sparkrun.core.recipes import Readiness

if TYPE_CHECKING:
    from sparkrun.core.executors.agent_transport import AgentTransport

__all__ = ["Executor", "Executors", "LaunchSpec", "is_local_host", "state_of"]

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass(frozen=True)
class LaunchSpec:
    """What to start on one host: the command, its environment and how to tell it is ready."""

    name: str
    argv: list[str]
    env: Mapping[str, str]
    cwd: Path
    port: int
    readiness: Readiness
    log_path: Path
    #: Told the host's process as soon as it runs (before it is ready).
    on_started: Callable[[Placement], None] = lambda placement: None
    #: Told each readiness step: (index, total, label).
    on_step: Callable[[int, int, str], None] = lambda index, total, label: None
    #: Asked while waiting for readiness: True ends the wait (the executor stops what it started).
    cancelled: Callable[[], bool] = lambda: False


class Executor(Protocol):
    """What the launch pipeline, status, stop and logs need from a host."""

    host: str
    #: The address the workload binds there (a recipe's ``{host}``) and its URL points at.
    address: str
    #: What a recipe's ``{python}`` means there.
    python: str

    def argv(self, command: str) -> list[str]: ...

    def check_port_free(self, port: int) -> None: ...

    def launch(self, spec: LaunchSpec) -> Placement:
        """Start the workload and wait until it is ready; on any failure, stop what was started and raise."""
        ...

    def alive(self, placement: Placement) -> bool: ...

    def stop(self, placement: Placement, *, grace: float = 5.0) -> str: ...

    def logs(
        self, placement: Placement, *, tail: int | None, follow: bool, cancel: threading.Event | None = None
    ) -> Iterator[str]:
        """The placement's log lines; ``cancel`` (set from another thread) ends a follow early."""
        ...


_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1"}


def is_local_host(host: str) -> bool:
    return host in _LOCAL_NAMES or host in (socket.gethostname(), socket.getfqdn())


class Executors:
    """One executor per host for a configuration, and bounded parallel calls across hosts."""

    def __init__(self, config: Config) -> None:
        self._state_dir = config.state_dir
        self._inventory = read_inventory(config.values)
        self._options = read_ssh_options(config.values)
        self._cache: dict[str, Executor] = {}

    def for_host(self, host: str) -> Executor:
        """The executor of a recipe's host name, reached as the inventory says."""
        return self._executor(host, None)

    def for_placement(self, placement: Placement) -> Executor:
        """The executor of a recorded placement, reached as it was at launch."""
        return self._executor(placement.host, placement.ssh)

    def _executor(self, host: str, recorded: Mapping[str, object] | None) -> Executor:
        entry = HostEntry.from_json(recorded) if recorded is not None else None
        key = f"{host}\0{sorted(recorded.items()) if recorded else ''}"
        if key not in self._cache:
            if entry is None and is_local_host(host):
                from sparkrun.core.executors.process import ProcessExecutor

                self._cache[key] = ProcessExecutor(host)
            else:
                from sparkrun.core.executors.ssh import SshExecutor

                entry = entry or self._inventory.get(host) or HostEntry(check_host_name(host))
                self._cache[key] = SshExecutor(entry, self._state_dir, self._options)
        return self._cache[key]

    def transport_for(self, host: str) -> AgentTransport:
        """The agent of ``host``: over its SSH connection, or on this machine under the state directory."""
        executor = self.for_host(host)
        transport: AgentTransport | None = getattr(executor, "transport", None)
        if transport is None:
            from sparkrun.core.executors.agent_transport import LocalTransport

            transport = LocalTransport(host, self._state_dir / "hosted")
        return transport

    def fan_out(
        self, function: Callable[[_T], _R], items: Iterable[_T], *, cancel: threading.Event | None = None
    ) -> list[_R | BaseException]:
        """``function`` on every item, at most ``ssh.parallel`` at once; each result or the exception it raised.

        Each call runs with the caller's operation context, so what it reports
        belongs to the same operation. If the caller is interrupted while
        waiting (Ctrl+C), ``cancel`` is set so the calls can end early, and the
        interruption is raised once they have.
        """
        from sparkrun.core.operation import submit

        items = list(items)
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(len(items), self._options.parallel)) as pool:
            futures = [submit(pool, _result, function, item) for item in items]
            try:
                return [future.result() for future in futures]
            except BaseException:
                if cancel is not None:
                    cancel.set()
                raise

    def host_states(self, deployment: Deployment) -> dict[str, bool | BaseException]:
        """Per host of the deployment: whether its process runs (or why that cannot be told)."""
        answers = self.fan_out(lambda placement: self.for_placement(placement).alive(placement), deployment.placements)
        return {placement.host: answer for placement, answer in zip(deployment.placements, answers, strict=True)}

    def state(self, deployment: Deployment) -> str:
        """``running`` on every host, ``partial`` on some (or some cannot be asked), ``exited`` on none."""
        return state_of(self.host_states(deployment))


def state_of(states: Mapping[str, bool | BaseException]) -> str:
    running = [answer is True for answer in states.values()]
    if running and all(running):
        return "running"
    if any(running) or any(isinstance(answer, BaseException) for answer in states.values()):
        return "partial" if any(running) else "unknown"
    return "exited"


def _result(function: Callable[[_T], _R], item: _T) -> _R | BaseException:
    try:
        return function(item)
    except Exception as error:  # returned to the caller, who reports it per host
        return error
