"""Deployment records: what was launched, where, and how to find it again.

One JSON file per deployment under ``<state_dir>/deployments/``, next to the
workload's log, so ``status``, ``stop`` and ``logs`` work from any later
process. A deployment name follows the name rule (:mod:`sparkrun.core.names`)
and every path is checked to stay in that folder. Each host's process is a
:class:`Placement` whose :class:`~sparkrun.core.processes.ProcessIdentity`
(start time, boot and a marker in the workload's environment) is checked on
its host by its executor, so a recycled pid is never mistaken for the
workload.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from sparkrun.core.names import is_name, path_in
from sparkrun.core.processes import ProcessIdentity
from sparkrun.errors import DeploymentError

__all__ = ["KEPT_LOGS", "Deployment", "DeploymentStore", "Placement"]

_log = logging.getLogger(__name__)
#: Logs of stopped deployments kept for ``sparkrun logs``; older ones are deleted.
KEPT_LOGS = 20


@dataclass
class Placement:
    """One host's process of a deployment: where it runs, how to prove it is ours, where its log is.

    ``ssh`` is the inventory entry the host was reached through (None for
    this machine): stop, status and logs use what the launch used, even if
    the configuration changed since.
    """

    host: str
    pid: int
    start_ticks: int | None
    boot_id: str | None
    marker: str | None
    log_path: str
    url: str
    ssh: dict[str, Any] | None = None

    @property
    def identity(self) -> ProcessIdentity:
        return ProcessIdentity(self.pid, self.start_ticks, self.boot_id, self.marker)

    @classmethod
    def started(cls, host: str, identity: ProcessIdentity, *, log_path: str, url: str, **extra: Any) -> Placement:
        return cls(host, identity.pid, identity.start_ticks, identity.boot_id, identity.marker, log_path, url, **extra)


@dataclass
class Deployment:
    """A launched workload, as recorded on disk: one placement per host it runs on."""

    name: str
    recipe: str
    recipe_path: str
    runtime: str
    hosts: list[str]
    port: int
    command: str
    placements: list[Placement]
    operation_id: str
    started_at: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pids(self) -> list[int]:
        return [placement.pid for placement in self.placements]

    @property
    def url(self) -> str:
        return self.placements[0].url if self.placements else ""

    @property
    def log_path(self) -> str:
        """The first host's log (on that host; the only one on this machine for a local deployment)."""
        return self.placements[0].log_path if self.placements else ""


def _upgraded(data: dict[str, Any]) -> dict[str, Any]:
    """A record written before deployments had placements: its one local process becomes one."""
    if "placements" in data or "pid" not in data:
        return data
    single = {key: data.pop(key, None) for key in ("pid", "start_ticks", "boot_id", "marker", "log_path", "url")}
    hosts = data.get("hosts") or ["localhost"]
    data["placements"] = [{"host": hosts[0], **single}]
    return data


_FIELDS = {f.name for f in fields(Deployment)}


class DeploymentStore:
    """Reads and writes deployment records in one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = Path(state_dir) / "deployments"

    def log_path(self, name: str) -> Path:
        return path_in(self.directory, name, ".log", field="deployment")

    def _record(self, name: str) -> Path:
        return path_in(self.directory, name, ".json", field="deployment")

    def save(self, deployment: Deployment) -> None:
        record = self._record(deployment.name)
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = record.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(asdict(deployment), indent=2), encoding="utf-8")
        temporary.replace(record)

    def load(self, name: str) -> Deployment | None:
        record = self._record(name)
        try:
            data = json.loads(record.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as error:
            raise DeploymentError(f"unreadable deployment record (path={record}, {error})") from error
        if not isinstance(data, dict) or data.get("name") != name:
            raise DeploymentError(f"unreadable deployment record (path={record}); remove it to forget the deployment")
        try:
            values = {key: value for key, value in _upgraded(data).items() if key in _FIELDS}
            values["placements"] = [Placement(**placement) for placement in values["placements"]]
            return Deployment(**values)
        except (KeyError, TypeError) as error:
            raise DeploymentError(f"unreadable deployment record (path={record}, {error})") from error

    def remove(self, name: str) -> None:
        self._record(name).unlink(missing_ok=True)

    def prune_logs(self, keep: int = KEPT_LOGS) -> list[Path]:
        """Delete the logs of stopped deployments beyond the ``keep`` most recent; returns what went.

        A running deployment's log is never touched; a stopped one keeps its
        last run's log (for ``sparkrun logs``) until it is among the oldest.
        """
        if not self.directory.is_dir():
            return []
        running = {path.stem for path in self.directory.glob("*.json")}
        stopped = [
            path
            for path in self.directory.glob("*.log*")
            if path.is_file() and (path.suffix != ".log" or path.stem not in running)
        ]
        stopped.sort(key=lambda path: path.stat().st_mtime, reverse=True)
        doomed = [path for index, path in enumerate(stopped) if index >= keep or path.suffix != ".log"]
        for path in doomed:
            path.unlink(missing_ok=True)
        return doomed

    def all(self) -> list[Deployment]:
        """Every readable record; files that are not a deployment's are skipped with a warning."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in sorted(self.directory.glob("*.json")):
            if not is_name(path.stem):
                _log.warning("ignoring %s: not a deployment record (its name breaks the name rule)", path)
                continue
            try:
                deployment = self.load(path.stem)
            except (DeploymentError, ValueError) as error:
                _log.warning("ignoring %s", error)
                continue
            if deployment is not None:
                found.append(deployment)
        return found
