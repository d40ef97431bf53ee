"""``api.run``: launch a workload from a recipe, phase by phase.

The returned :class:`RunResult` (or the raised exception) is the
authoritative outcome; the events reported on the way are for people and
dashboards, never for deciding success.
"""

from __future__ import annotations

import difflib
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparkrun.api.manage import DeploymentStatus
from sparkrun.application import initialize
from sparkrun.config import default_config_path
from sparkrun.core.context import SparkrunContext
from sparkrun.core.deployments import Deployment, DeploymentStore
from sparkrun.core.distribution import DistributionRequest, provider_for
from sparkrun.core.executors import Executor, executor_for
from sparkrun.core.launch_progress import LaunchPhaseTracker
from sparkrun.core.names import check_name
from sparkrun.core.operation import Operation, operation_scope
from sparkrun.core.recipes import BUILTIN_PLACEHOLDERS, Recipe, find_recipe, recipe_dirs, render_command
from sparkrun.errors import DeploymentError, LaunchError, RecipeError
from sparkrun.feedback import FeedbackReporter, get_feedback

__all__ = ["RunOptions", "RunResult", "run"]

_SOURCE = "sparkrun.launch"


@dataclass
class RunOptions:
    """What to launch and how.

    ``recipe`` is a recipe name (looked up in the recipe directories) or a
    path. ``overrides`` fill command placeholders over the recipe's
    defaults. With ``detached=True`` the call returns once the workload is
    ready; with ``False`` it then waits until the workload exits.
    ``track_phases`` (default: only when something subscribes to events)
    turns the launch phase tracker on or off.
    """

    recipe: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    port: int | None = None
    name: str | None = None
    detached: bool = True
    track_phases: bool | None = None


class RunResult(DeploymentStatus):
    """What a launch started: the deployment, with the launch's operation id."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class _Plan:
    recipe: Recipe
    name: str
    host: str
    port: int
    argv: list[str]
    command: str
    executor: Executor


def _prepare(options: RunOptions, sctx: SparkrunContext, store: DeploymentStore) -> _Plan:
    config = sctx.config
    config_dir = (config.path or default_config_path()).parent
    recipe = find_recipe(options.recipe, recipe_dirs(config.values, config_dir))
    name = recipe.name if options.name is None else check_name("name", options.name)
    existing = store.load(name)
    if existing is not None and existing.alive():
        raise DeploymentError(
            f"a deployment with this name is already running (deployment={name}, pid={existing.pid}); "
            f"stop it first with `sparkrun stop {name}`"
        )
    if len(recipe.hosts) != 1:
        raise LaunchError(f"process deployments run on exactly one host for now (hosts={list(recipe.hosts)})")
    host = recipe.hosts[0]
    executor = executor_for(host)
    port = options.port or recipe.port
    if port is None:
        port = _free_port()
    else:
        executor.check_port_free(port)
    builtin = sorted(set(options.overrides) & set(BUILTIN_PLACEHOLDERS))
    if builtin:
        hint = "; use --port" if builtin[0] == "port" else ""
        raise ValueError(
            f"{builtin[0]} is a built-in placeholder and cannot be overridden (override={builtin[0]}){hint}"
        )
    _check_overrides(recipe, options.overrides)
    values = {key: str(value) for key, value in options.overrides.items()}
    command = render_command(recipe, {**values, "name": name, "port": port, "host": "127.0.0.1"})
    return _Plan(recipe, name, host, port, executor.argv(command), command, executor)


def _check_overrides(recipe: Recipe, overrides: Mapping[str, Any]) -> None:
    """An override the command never uses is a typo until proven otherwise: refuse it with a suggestion."""
    used = recipe.placeholders()
    for key in overrides:
        if key not in used:
            close = difflib.get_close_matches(key, used, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            known = ", ".join(sorted(set(used) - set(BUILTIN_PLACEHOLDERS))) or "none"
            raise RecipeError(
                f"{recipe.path}: --set {key} matches no placeholder of the command; {hint}"
                f"(placeholders you can set: {known}) (field=command)"
            )


def _distribute(plan: _Plan, tracker: LaunchPhaseTracker, feedback: FeedbackReporter, state_dir: Path) -> None:
    kinds: tuple[tuple[Literal["image", "model"], str | None], ...] = (
        ("image", plan.recipe.image),
        ("model", plan.recipe.model),
    )
    wanted = [(kind, ref) for kind, ref in kinds if ref]
    if not wanted:
        tracker.skip("distribute", "the recipe names no image or model")
        return
    routed = []
    for kind, reference in wanted:
        request = DistributionRequest(
            kind, reference, (plan.host,), state_dir, feedback.child(source=f"{_SOURCE}.{kind}")
        )
        routed.append((request, provider_for(request)))
    if all(provider is None for _, provider in routed):
        names = ", ".join(f"{request.kind} {request.reference}" for request, _ in routed)
        tracker.skip("distribute", f"no distribution provider registered for {names}")
        return
    with tracker.phase("distribute"):
        for index, (request, provider) in enumerate(routed, start=1):
            label = f"{request.kind} {request.reference}"
            if provider is None:
                tracker.step("distribute", index, len(routed), f"{label}: no provider, left as is")
                continue
            tracker.step("distribute", index, len(routed), f"{label} via {provider.name}")
            provider.distribute(request)


def _start(plan: _Plan, tracker: LaunchPhaseTracker, feedback: FeedbackReporter, store: DeploymentStore) -> Deployment:
    log_path = store.log_path(plan.name)
    recipe = plan.recipe
    with tracker.phase("runtime"):
        tracker.step("runtime", 1, 2, f"starting {plan.argv[0]}")
        started = time.monotonic()
        identity = plan.executor.start(plan.argv, env=recipe.env, cwd=recipe.path.parent, log_path=log_path)
        pid = identity.pid
        feedback.progress(f"Started {plan.name} (pid {pid})", stage="start", status="running", metrics={"pid": pid})
        tracker.step("runtime", 2, 2, "waiting until ready")

        def readiness_step(index: int, total: int, label: str) -> None:
            feedback.progress(label, stage="readiness")

        try:
            with feedback.heartbeat(lambda: f"Waiting for {plan.name} to become ready", interval=5.0):
                plan.executor.wait_ready(
                    identity,
                    port=plan.port,
                    readiness=recipe.readiness,
                    log_path=log_path,
                    on_step=readiness_step,
                )
        except BaseException:  # not ready, or interrupted (Ctrl+C): leave nothing unrecorded behind
            plan.executor.stop(identity, grace=2.0)
            raise
        startup = round(time.monotonic() - started, 3)
    url = f"http://127.0.0.1:{plan.port}"
    feedback.progress(
        f"{plan.name} is ready at {url}",
        stage="ready",
        metrics={"port": plan.port, "pid": pid, "startup_seconds": startup},
    )
    return Deployment(
        name=plan.name,
        recipe=recipe.name,
        recipe_path=str(recipe.path),
        runtime=recipe.runtime,
        hosts=[plan.host],
        port=plan.port,
        command=plan.command,
        pid=pid,
        start_ticks=identity.start_ticks,
        log_path=str(log_path),
        url=url,
        operation_id=feedback.operation_id,
        started_at=time.time(),
        boot_id=identity.boot_id,
        marker=identity.marker,
    )


def _launch(options: RunOptions, sctx: SparkrunContext, operation: Operation) -> RunResult:
    enabled = options.track_phases if options.track_phases is not None else operation.has_subscribers
    tracker = LaunchPhaseTracker(operation, enabled=enabled)
    feedback = get_feedback(_SOURCE, sctx=sctx)
    store = DeploymentStore(sctx.config.state_dir)
    try:
        with tracker.phase("prepare"):
            plan = _prepare(options, sctx, store)
        tracker.skip("build", "the process runtime has nothing to build")
        _distribute(plan, tracker, feedback, sctx.config.state_dir)
        tracker.skip("tuning", "the process runtime has no tuning step")
        deployment = _start(plan, tracker, feedback, store)
        with tracker.phase("post_launch"):
            store.save(deployment)
            store.prune_logs()
    except BaseException as error:
        reason = (str(error).splitlines() or [""])[0] or type(error).__name__
        feedback.error(reason, status="failed", metrics={"error_type": type(error).__name__})
        raise
    feedback.progress(f"{deployment.name} is running", status="succeeded")
    return RunResult.from_record(deployment)


def run(options: RunOptions, *, sctx: SparkrunContext | None = None) -> RunResult:
    """Launch the workload of ``options.recipe`` as one ``run`` operation."""
    sctx = sctx if sctx is not None else initialize()
    with operation_scope(sctx, name="run") as operation:
        result = _launch(options, sctx, operation)
    if options.detached:
        return result
    store = DeploymentStore(sctx.config.state_dir)
    deployment = store.load(result.name)
    try:
        while deployment is not None and deployment.alive():
            time.sleep(0.2)
    except KeyboardInterrupt:
        return result  # detach: the workload keeps running
    return RunResult.from_record(deployment, state="exited") if deployment is not None else result
