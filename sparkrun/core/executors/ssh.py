"""The ``ssh`` executor: workloads on a remote host, run by the agent sparkrun sends there.

Every call is one agent request over the host's master connection (see
:mod:`~sparkrun.core.executors.ssh_transport`). The launch is one streamed
request: the agent starts the workload, says so, and reports the readiness
steps until it is ready, so a host costs one round trip, not one per check.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sparkrun.core.deployments import Placement
from sparkrun.core.executors.inventory import HostEntry, SshOptions
from sparkrun.core.executors.process import split_command
from sparkrun.core.executors.ssh_transport import SshTransport
from sparkrun.core.processes import ProcessIdentity
from sparkrun.errors import HostError

if TYPE_CHECKING:
    from sparkrun.core.executors import LaunchSpec

__all__ = ["SshExecutor"]


class SshExecutor:
    """Starts, checks and stops workloads on one host reached over SSH."""

    def __init__(self, entry: HostEntry, state_dir: Path, options: SshOptions) -> None:
        self.entry = entry
        self.host = entry.name
        self.address = entry.destination
        self.python = entry.python
        self.transport = SshTransport(entry, state_dir, options)

    def argv(self, command: str) -> list[str]:
        """Split a rendered command; whether its program exists is checked on the host, at launch."""
        return split_command(command)

    def check_port_free(self, port: int) -> None:
        self.transport.call({"action": "probe", "address": self.address, "port": port})

    def launch(self, spec: LaunchSpec) -> Placement:
        """Start and wait over one streamed request; if it fails or is interrupted, stop what started."""
        request = {
            "action": "launch",
            "name": spec.name,
            "argv": spec.argv,
            "env": dict(spec.env),
            "address": self.address,
            "port": spec.port,
            "http_path": spec.readiness.http_path,
            "timeout": spec.readiness.timeout,
        }
        placement: Placement | None = None
        try:
            for message in self.transport.stream(request):
                if spec.cancelled():
                    raise HostError(f"{self.host}: the launch was interrupted", host=self.host, kind="cancelled")
                if message.get("event") == "started":
                    identity = ProcessIdentity.from_json(message.get("identity"))
                    if identity is None:
                        raise HostError(f"{self.host}: the agent sent an unreadable identity", host=self.host)
                    url_host = f"[{self.address}]" if ":" in self.address else self.address
                    placement = Placement.started(
                        self.host,
                        identity,
                        log_path=str(message.get("log_path", "")),
                        url=f"http://{url_host}:{spec.port}",
                        ssh=self.entry.to_json(),
                    )
                    spec.on_started(placement)
                elif message.get("event") == "step":
                    spec.on_step(int(message["index"]), int(message["total"]), str(message["label"]))
        except BaseException:
            if placement is not None:
                self._stop_quietly(placement)
            raise
        if placement is None:
            raise HostError(f"{self.host}: the agent ended without starting the workload", host=self.host)
        return placement

    def _stop_quietly(self, placement: Placement) -> None:
        with contextlib.suppress(HostError):  # the launch error says what went wrong; `stop` retries the cleanup
            self.stop(placement, grace=2.0)

    def alive(self, placement: Placement) -> bool:
        answers = self.transport.call({"action": "alive", "identities": [placement.identity.to_json()]})
        return bool(answers[0])

    def stop(self, placement: Placement, *, grace: float = 5.0) -> str:
        request = {
            "action": "stop",
            "name": Path(placement.log_path).stem,
            "identity": placement.identity.to_json(),
            "grace": grace,
        }
        return str(self.transport.call(request, timeout=grace + 30))

    def logs(
        self, placement: Placement, *, tail: int | None, follow: bool, cancel: threading.Event | None = None
    ) -> Iterator[str]:
        request = {
            "action": "logs",
            "name": Path(placement.log_path).stem,
            "identity": placement.identity.to_json(),
            "tail": tail,
            "follow": follow,
        }
        for message in self.transport.stream(request, cancel=cancel):
            if "line" in message:
                yield str(message["line"])
