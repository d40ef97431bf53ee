"""``api.stop``, ``api.status`` and ``api.logs``: deployments after launch.

They read the deployment records the launch wrote, so they work from any
process, long after the one that launched the workload has exited.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

from sparkrun.application import initialize
from sparkrun.core import log_tail
from sparkrun.core.context import SparkrunContext
from sparkrun.core.deployments import Deployment, DeploymentStore
from sparkrun.core.executors import executor_for
from sparkrun.core.names import check_name
from sparkrun.core.operation import operation_scope
from sparkrun.errors import DeploymentError
from sparkrun.feedback import get_feedback

__all__ = ["DeploymentStatus", "StopResult", "logs", "status", "stop"]

_FOLLOW_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class DeploymentStatus:
    """A deployment as the caller sees it; ``operation_id`` is the launch's."""

    name: str
    state: str
    recipe: str
    hosts: tuple[str, ...]
    port: int
    pids: tuple[int, ...]
    url: str
    started_at: float
    log_path: Path
    operation_id: str

    @classmethod
    def from_record(cls, record: Deployment, **changes: Any) -> Self:
        values = {
            "name": record.name,
            "state": record.state,
            "recipe": record.recipe,
            "hosts": tuple(record.hosts),
            "port": record.port,
            "pids": tuple(record.pids),
            "url": record.url,
            "started_at": record.started_at,
            "log_path": Path(record.log_path),
            "operation_id": record.operation_id,
        }
        return cls(**{**values, **changes})


@dataclass(frozen=True)
class StopResult:
    name: str
    outcome: str  # terminated, killed or already exited


def _context(sctx: SparkrunContext | None) -> SparkrunContext:
    return sctx if sctx is not None else initialize()


def _find(store: DeploymentStore, name: str) -> Deployment:
    deployment = store.load(check_name("deployment", name))
    if deployment is None:
        known = ", ".join(d.name for d in store.all()) or "none"
        raise DeploymentError(f"no deployment with this name (deployment={name!r}, known: {known})")
    return deployment


def status(*, sctx: SparkrunContext | None = None) -> list[DeploymentStatus]:
    """Every recorded deployment and whether its process still runs."""
    sctx = _context(sctx)
    with operation_scope(sctx, name="status"):
        return [DeploymentStatus.from_record(d) for d in DeploymentStore(sctx.config.state_dir).all()]


def stop(
    name: str | None = None, *, all: bool = False, grace: float = 5.0, sctx: SparkrunContext | None = None
) -> list[StopResult]:
    """Stop one deployment (or ``all`` of them): SIGTERM to its process group, SIGKILL after ``grace``."""
    if (name is None) == (not all):
        raise ValueError("name is required unless all=True (and cannot be combined with it)")
    sctx = _context(sctx)
    with operation_scope(sctx, name="stop"):
        store = DeploymentStore(sctx.config.state_dir)
        if name is None:  # all=True: exactly one of the two was given (checked above)
            targets = [d for d in store.all() if d.alive()]
        else:
            deployment = _find(store, name)
            if not deployment.alive():
                store.remove(deployment.name)
                raise DeploymentError(f"deployment is not running; its record is removed (deployment={name!r})")
            targets = [deployment]
        feedback = get_feedback("sparkrun.stop", sctx=sctx)
        results = []
        for deployment in targets:
            activity = feedback.child(host=deployment.hosts[0])
            activity.progress(f"Stopping {deployment.name} (pid {deployment.pid})", stage="stop", status="running")
            outcome = executor_for(deployment.hosts[0]).stop(deployment.identity, grace=grace)
            store.remove(deployment.name)
            activity.progress(f"{deployment.name}: {outcome}", stage="stop", status="succeeded")
            results.append(StopResult(deployment.name, outcome))
        store.prune_logs()
        feedback.progress(f"Stopped {len(results)} deployment(s)", stage="stop", status="succeeded")
        return results


def _follow(path: Path, alive: Callable[[], bool], tail: int | None, follow: bool) -> Iterator[str]:
    lines, position = log_tail.start(path, tail)
    yield from lines
    end = None if follow else _size(path)  # without follow, what was there when asked, however fast it grows
    while True:
        ended = end is not None or not alive()  # checked before reading, so its last lines are read
        lines, position, had_data = log_tail.read_new(path, position, final=ended)
        yield from lines
        if (ended and not had_data) or (end is not None and position >= end):
            return
        if not lines:
            time.sleep(_FOLLOW_POLL_SECONDS)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def logs(
    name: str, *, follow: bool = False, tail: int | None = None, sctx: SparkrunContext | None = None
) -> Iterator[str]:
    """The workload's log lines: the last ``tail`` (or all), then new ones while it runs if ``follow``.

    A deployment that was stopped keeps its last run's log (see
    :meth:`~sparkrun.core.deployments.DeploymentStore.prune_logs`); its lines
    are returned as they are, and ``follow`` ends at once.
    """
    if tail is not None and tail < 0:
        raise ValueError(f"tail is {tail}; it must be >= 0")
    sctx = _context(sctx)
    store = DeploymentStore(sctx.config.state_dir)
    with operation_scope(sctx, name="logs"):
        deployment = store.load(check_name("deployment", name))
        if deployment is None:
            kept = store.log_path(name)
            if not kept.is_file():
                _find(store, name)  # raises, naming the known deployments
            return _follow(kept, lambda: False, tail, follow)
    return _follow(Path(deployment.log_path), deployment.alive, tail, follow)
