"""Deployment records: what was launched, where, and how to find it again.

One JSON file per deployment under ``<state_dir>/deployments/``, next to the
workload's log, so ``status``, ``stop`` and ``logs`` work from any later
process. Liveness is checked against the recorded process start time, so a
recycled pid is not mistaken for the workload.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sparkrun.errors import DeploymentError

__all__ = ["Deployment", "DeploymentStore", "process_alive", "process_start_ticks"]


def process_start_ticks(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def process_alive(pid: int, start_ticks: int | None) -> bool:
    """Whether ``pid`` still runs (not a zombie) and is the same process as recorded."""
    current = process_start_ticks(pid)
    return current is not None and (start_ticks is None or current == start_ticks)


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

    @property
    def pids(self) -> list[int]:
        return [self.pid]

    def alive(self) -> bool:
        return process_alive(self.pid, self.start_ticks)

    @property
    def state(self) -> str:
        return "running" if self.alive() else "exited"


class DeploymentStore:
    """Reads and writes deployment records in one state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.directory = Path(state_dir) / "deployments"

    def log_path(self, name: str) -> Path:
        return self.directory / f"{name}.log"

    def _record(self, name: str) -> Path:
        return self.directory / f"{name}.json"

    def save(self, deployment: Deployment) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self._record(deployment.name).with_suffix(".json.tmp")
        temporary.write_text(json.dumps(asdict(deployment), indent=2), encoding="utf-8")
        temporary.replace(self._record(deployment.name))

    def load(self, name: str) -> Deployment | None:
        try:
            data = json.loads(self._record(name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError) as error:
            raise DeploymentError(f"unreadable deployment record (path={self._record(name)}, {error})") from error
        return Deployment(**data)

    def remove(self, name: str) -> None:
        self._record(name).unlink(missing_ok=True)

    def all(self) -> list[Deployment]:
        if not self.directory.is_dir():
            return []
        found = (self.load(path.stem) for path in sorted(self.directory.glob("*.json")))
        return [deployment for deployment in found if deployment is not None]
