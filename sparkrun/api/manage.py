"""``api.stop``, ``api.status`` and ``api.logs``: deployments after launch.

They read the deployment records the launch wrote, so they work from any
process, long after the one that launched the workload has exited.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from sparkrun.application import initialize
from sparkrun.core import log_tail
from sparkrun.core.context import SparkrunContext
from sparkrun.core.deployments import Deployment, DeploymentStore, Placement
from sparkrun.core.executors import Executors, state_of
from sparkrun.core.host_lines import merge_lines
from sparkrun.core.names import check_name
from sparkrun.core.operation import operation_scope
from sparkrun.errors import DeploymentError
from sparkrun.feedback import FeedbackReporter, get_feedback

__all__ = ["DeploymentStatus", "StopResult", "logs", "status", "stop"]


@dataclass(frozen=True)
class DeploymentStatus:
    """A deployment as the caller sees it; ``operation_id`` is the launch's.

    ``state`` is ``running`` (every host), ``partial`` (some), ``exited``
    (none) or ``unknown`` (no host could be asked); ``host_states`` says it
    per host, with the reason when a host could not be asked.
    """

    name: str
    state: str
    recipe: str
    hosts: tuple[str, ...]
    port: int
    pids: tuple[int, ...]
    url: str
    urls: tuple[str, ...]
    host_states: Mapping[str, str]
    started_at: float
    log_path: Path
    operation_id: str

    @classmethod
    def from_record(
        cls, record: Deployment, *, state: str, host_states: Mapping[str, bool | BaseException] | None = None
    ) -> Self:
        answers = host_states or {}
        return cls(
            name=record.name,
            state=state,
            recipe=record.recipe,
            hosts=tuple(placement.host for placement in record.placements),
            port=record.port,
            pids=tuple(record.pids),
            url=record.url,
            urls=tuple(placement.url for placement in record.placements),
            host_states={host: _host_state(answers.get(host, state == "running")) for host in record.hosts},
            started_at=record.started_at,
            log_path=Path(record.log_path),
            operation_id=record.operation_id,
        )


def _host_state(answer: bool | BaseException) -> str:
    if isinstance(answer, BaseException):
        return f"unknown: {(str(answer).splitlines() or [type(answer).__name__])[0]}"
    return "running" if answer else "exited"


@dataclass(frozen=True)
class StopResult:
    name: str
    outcome: str  # terminated, killed or already exited; per host, joined, when there are several
    hosts: Mapping[str, str] = field(default_factory=dict)


def _context(sctx: SparkrunContext | None) -> SparkrunContext:
    return sctx if sctx is not None else initialize()


def _find(store: DeploymentStore, name: str) -> Deployment:
    deployment = store.load(check_name("deployment", name))
    if deployment is None:
        known = ", ".join(d.name for d in store.all()) or "none"
        raise DeploymentError(f"no deployment with this name (deployment={name!r}, known: {known})")
    return deployment


def status(*, sctx: SparkrunContext | None = None) -> list[DeploymentStatus]:
    """Every recorded deployment and whether its processes still run, asked of all hosts at once."""
    sctx = _context(sctx)
    with operation_scope(sctx, name="status"):
        executors = Executors(sctx.config)
        deployments = DeploymentStore(sctx.config.state_dir).all()
        answers = executors.fan_out(executors.host_states, deployments)
        found = []
        for deployment, states in zip(deployments, answers, strict=True):
            states = {} if isinstance(states, BaseException) else states
            found.append(DeploymentStatus.from_record(deployment, state=state_of(states), host_states=states))
        return found


def stop(
    name: str | None = None, *, all: bool = False, grace: float = 5.0, sctx: SparkrunContext | None = None
) -> list[StopResult]:
    """Stop one deployment (or ``all`` of them) on every host: SIGTERM to its process group, SIGKILL after ``grace``.

    Hosts are stopped in parallel; a host that cannot be reached keeps the
    record (with that host only), so a later ``stop`` retries it.
    """
    if (name is None) == (not all):
        raise ValueError("name is required unless all=True (and cannot be combined with it)")
    sctx = _context(sctx)
    with operation_scope(sctx, name="stop"):
        store = DeploymentStore(sctx.config.state_dir)
        executors = Executors(sctx.config)
        # all=True stops what runs; a named stop asks its hosts only once, by stopping (it says what exited)
        targets = [d for d in store.all() if executors.state(d) != "exited"] if name is None else [_find(store, name)]
        feedback = get_feedback("sparkrun.stop", sctx=sctx)
        results = [_stop_one(deployment, executors, store, feedback, grace) for deployment in targets]
        if name is not None and set(results[0].hosts.values()) == {"already exited"}:
            raise DeploymentError(f"deployment is not running; its record is removed (deployment={name!r})")
        store.prune_logs()
        feedback.progress(f"Stopped {len(results)} deployment(s)", stage="stop", status="succeeded")
        return results


def _stop_one(
    deployment: Deployment, executors: Executors, store: DeploymentStore, feedback: FeedbackReporter, grace: float
) -> StopResult:
    def stop_on(placement: Placement) -> str:
        activity = feedback.child(host=placement.host)
        activity.progress(f"Stopping {deployment.name} (pid {placement.pid})", stage="stop", status="running")
        try:
            outcome = executors.for_placement(placement).stop(placement, grace=grace)
        except Exception as error:
            activity.error((str(error).splitlines() or [""])[0], stage="stop", status="failed")
            raise
        activity.progress(f"{deployment.name}: {outcome}", stage="stop", status="succeeded")
        return outcome

    answers = executors.fan_out(stop_on, deployment.placements)
    failed = [
        (placement, answer)
        for placement, answer in zip(deployment.placements, answers, strict=True)
        if isinstance(answer, BaseException)
    ]
    if failed:
        deployment.placements = [placement for placement, _ in failed]
        store.save(deployment)
        details = "; ".join(f"{placement.host}: {error}" for placement, error in failed)
        raise DeploymentError(f"{deployment.name} could not be stopped on every host ({details}); run stop again")
    store.remove(deployment.name)
    outcomes = {placement.host: str(answer) for placement, answer in zip(deployment.placements, answers, strict=True)}
    return StopResult(deployment.name, ", ".join(sorted(set(outcomes.values()))), outcomes)


def logs(
    name: str,
    *,
    follow: bool = False,
    tail: int | None = None,
    host: str | None = None,
    sctx: SparkrunContext | None = None,
) -> Iterator[str]:
    """The workload's log lines: the last ``tail`` (or all), then new ones while it runs if ``follow``.

    A deployment on several hosts gives every host's lines (or ``host``'s
    only), each prefixed with ``[host]``, merged as they arrive. A deployment
    that was stopped keeps its last run's log (see
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
            return log_tail.follow(kept, lambda: False, tail, follow)
        placements = deployment.placements
        if host is not None:
            placements = [placement for placement in placements if placement.host == host]
            if not placements:
                raise DeploymentError(
                    f"{name} does not run on this host (host={host!r}, hosts: {', '.join(deployment.hosts)})"
                )
        executors = Executors(sctx.config)
        sources = [(p.host, executors.for_placement(p).logs(p, tail=tail, follow=follow)) for p in placements]
    if len(sources) == 1 and (host is not None or len(deployment.placements) == 1):
        return sources[0][1]
    return merge_lines(sources)
