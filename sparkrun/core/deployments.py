"""Deployment records: what was launched, where, and how to find it again.

One JSON file per deployment under ``<state_dir>/deployments/``, next to the
workload's log, so ``status``, ``stop`` and ``logs`` work from any later
process. A deployment name follows the name rule (:mod:`sparkrun.core.names`)
and every path is checked to stay in that folder. Liveness is a
:class:`~sparkrun.core.processes.ProcessIdentity` check (start time, boot and
a marker in the workload's environment), so a recycled pid is never mistaken
for the workload.
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

__all__ = ["KEPT_LOGS", "Deployment", "DeploymentStore"]

_log = logging.getLogger(__name__)
#: Logs of stopped deployments kept for ``sparkrun logs``; older ones are deleted.
KEPT_LOGS = 20


@dataclass
class Deployment:
    """A launched workload, as recorded on disk."""

    name: str
    recipe: str
    recipe_path: str
    runtime: str
    hosts: list[str]
    port: int
    command: str
    pid: int
    start_ticks: int | None
    log_path: str
    url: str
    operation_id: str
    started_at: float
    extra: dict[str, Any] = field(default_factory=dict)
    boot_id: str | None = None
    marker: str | None = None

    @property
    def pids(self) -> list[int]:
        return [self.pid]

    @property
    def identity(self) -> ProcessIdentity:
        return ProcessIdentity(self.pid, self.start_ticks, self.boot_id, self.marker)

    def alive(self) -> bool:
        return self.identity.matches()

    @property
    def state(self) -> str:
        return "running" if self.alive() else "exited"


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
        if not isinstance(data, dict) or not {"name", "pid", "start_ticks"} <= data.keys() or data["name"] != name:
            raise DeploymentError(f"unreadable deployment record (path={record}); remove it to forget the deployment")
        try:
            return Deployment(**{key: value for key, value in data.items() if key in _FIELDS})
        except TypeError as error:
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
