"""``api.run``: launch a workload from a recipe, phase by phase.

The returned :class:`RunResult` (or the raised exception) is the
authoritative outcome; the events reported on the way are for people and
dashboards, never for deciding success. One module of this size because the
phases share one plan (recipe, hosts, port, per-host activities) and read
top to bottom as the launch happens.
"""

from __future__ import annotations

import difflib
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrun.api.distribute import serve_request
from sparkrun.api.manage import DeploymentStatus
from sparkrun.application import initialize
from sparkrun.config import Config, default_config_path
from sparkrun.core.context import SparkrunContext
from sparkrun.core.deployments import Deployment, DeploymentStore, Placement
from sparkrun.core.distribution import (
    DistributionRequest,
    ImageCopyRequest,
    ImagePullRequest,
    ModelCopyRequest,
    provider_for,
)
from sparkrun.core.executors import Executor, Executors, LaunchSpec
from sparkrun.core.executors.process import ProcessExecutor
from sparkrun.core.launch_progress import LaunchPhaseTracker
from sparkrun.core.names import check_name
from sparkrun.core.operation import Operation, operation_scope
from sparkrun.core.recipes import BUILTIN_PLACEHOLDERS, Recipe, find_recipe, recipe_dirs, render_command
from sparkrun.core.trace_ids import trace_environment
from sparkrun.errors import DeploymentError, LaunchError, RecipeError
from sparkrun.feedback import FeedbackReporter, get_feedback

__all__ = ["PartialLaunchError", "RunOptions", "RunResult", "run"]

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


class PartialLaunchError(LaunchError):
    """The workload runs on some hosts only: ``result`` says what runs where, ``failures`` why the others failed.

    The partial deployment is recorded, so ``stop`` (or a retry after it) cleans it up.
    """

    def __init__(self, result: RunResult, failures: Mapping[str, BaseException]) -> None:
        running = ", ".join(f"{host} ({url})" for host, url in zip(result.hosts, result.urls, strict=True))
        failed = "; ".join(_host_reason(host, error) for host, error in failures.items())
        super().__init__(
            f"{result.name} runs on {len(result.hosts)} of {len(result.hosts) + len(failures)} hosts: "
            f"running on {running}; failed on {failed}. Stop the partial deployment with `sparkrun stop {result.name}`"
        )
        self.result = result
        self.failures = dict(failures)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass
class _HostPlan:
    executor: Executor
    argv: list[str]
    command: str

    @property
    def host(self) -> str:
        return self.executor.host


@dataclass
class _Plan:
    recipe: Recipe
    name: str
    port: int
    hosts: list[_HostPlan]
    executors: Executors
    #: One activity per host (its own row everywhere), or the launch's own for a single local host.
    activities: dict[str, FeedbackReporter]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(host.host for host in self.hosts)


def _prepare(options: RunOptions, sctx: SparkrunContext, store: DeploymentStore, feedback: FeedbackReporter) -> _Plan:
    config = sctx.config
    config_dir = (config.path or default_config_path()).parent
    recipe = find_recipe(options.recipe, recipe_dirs(config.values, config_dir))
    name = recipe.name if options.name is None else check_name("name", options.name)
    executors = Executors(config)
    existing = store.load(name)
    if existing is not None and executors.state(existing) != "exited":
        pids = ",".join(str(pid) for pid in existing.pids)
        hosts = "" if existing.hosts == ["localhost"] else f", hosts={','.join(existing.hosts)}"
        raise DeploymentError(
            f"a deployment with this name is already running (deployment={name}, pid={pids}{hosts}); "
            f"stop it first with `sparkrun stop {name}`"
        )
    repeated = sorted({host for host in recipe.hosts if recipe.hosts.count(host) > 1})
    if repeated:
        raise RecipeError(f"{recipe.path}: hosts lists {repeated[0]!r} more than once (field=hosts)")
    chosen = [executors.for_host(host) for host in recipe.hosts]
    builtin = sorted(set(options.overrides) & set(BUILTIN_PLACEHOLDERS))
    if builtin:
        hint = "; use --port" if builtin[0] == "port" else ""
        raise ValueError(
            f"{builtin[0]} is a built-in placeholder and cannot be overridden (override={builtin[0]}){hint}"
        )
    _check_overrides(recipe, options.overrides)
    port = options.port or recipe.port or _free_port()
    values = {key: str(value) for key, value in options.overrides.items()}
    plans = []
    for executor in chosen:
        filled = {**values, "name": name, "port": port, "host": executor.address, "python": executor.python}
        command = render_command(recipe, filled)
        plans.append(_HostPlan(executor, executor.argv(command), command))
    if len(chosen) == 1 and isinstance(chosen[0], ProcessExecutor):
        activities = {chosen[0].host: feedback}
    else:
        activities = {executor.host: feedback.child(host=executor.host) for executor in chosen}
    if options.port or recipe.port or len(chosen) > 1 or not isinstance(chosen[0], ProcessExecutor):
        _check_ports(chosen, port, executors, activities)
    return _Plan(recipe, name, port, plans, executors, activities)


def _check_ports(
    chosen: list[Executor], port: int, executors: Executors, activities: dict[str, FeedbackReporter]
) -> None:
    """The port must be free on every host: asked of all of them at once (which also proves each is reachable)."""

    def check(executor: Executor) -> None:
        activities[executor.host].progress(f"Checking port {port}", stage="check")
        executor.check_port_free(port)

    answers = executors.fan_out(check, chosen)
    failures = {executor.host: answer for executor, answer in zip(chosen, answers, strict=True) if answer is not None}
    for host, error in failures.items():
        if len(activities) > 1:  # a single host's failure is the launch's, reported once by the launch
            activities[host].error(_first_line(error), stage="check", status="failed")
    if failures:
        if len(chosen) == 1:
            raise next(iter(failures.values()))
        details = "; ".join(_host_reason(host, error) for host, error in failures.items())
        raise LaunchError(
            f"{len(failures)} of {len(chosen)} hosts cannot run the workload, nothing was started: {details}"
        )


def _host_reason(host: str, error: BaseException) -> str:
    """``host: reason``; a host error already starts with its host."""
    reason = _first_line(error)
    return reason if reason.startswith(f"{host}: ") else f"{host}: {reason}"


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [""])[0] or type(error).__name__


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


def _requests(plan: _Plan, feedback: FeedbackReporter, config: Config) -> tuple[list[DistributionRequest], list[str]]:
    """The recipe's ``image:`` and ``model:`` as requests (paths relative to the recipe), and what needs none."""
    recipe = plan.recipe
    requests: list[DistributionRequest] = []
    notes: list[str] = []
    child = feedback.child(source=f"{_SOURCE}.distribute")
    if recipe.image:
        if recipe.image.startswith("oci:"):
            path = recipe.path.parent / Path(recipe.image[4:]).expanduser()
            requests.append(ImageCopyRequest(f"oci:{path}", plan.names, child, config))
        else:
            requests.append(ImagePullRequest(recipe.image, plan.names, child, config))
    if recipe.model:
        model = recipe.path.parent / Path(recipe.model).expanduser()
        if model.is_dir():
            requests.append(ModelCopyRequest(str(model), plan.names, child, config))
        else:
            notes.append(f"model {recipe.model} is not a directory (the workload resolves it)")
    return requests, notes


def _distribute(plan: _Plan, tracker: LaunchPhaseTracker, feedback: FeedbackReporter, config: Config) -> None:
    requests, notes = _requests(plan, feedback, config)
    routed = [(request, provider_for(request)) for request in requests]
    notes += [f"no distribution provider for {r.kind} {r.source}" for r, provider in routed if provider is None]
    routed = [(request, provider) for request, provider in routed if provider is not None]
    if not routed:
        tracker.skip("distribute", "; ".join(notes) or "the recipe names no image or model")
        return
    total, index = sum(len(request.hosts) for request, _ in routed), 0
    with tracker.phase("distribute"):
        for request, _provider in routed:
            result = serve_request(request)  # raises, naming the hosts that failed
            for host, outcome in result.hosts.items():
                index += 1
                tracker.step("distribute", index, total, f"{request.kind} on {host}: {outcome.outcome}")


def _start(plan: _Plan, tracker: LaunchPhaseTracker, feedback: FeedbackReporter, store: DeploymentStore) -> Deployment:
    """Start on every host at once, each host its own activity; what failed is said per host.

    A host that fails stops what it started. If every host fails, nothing is
    recorded; if some run, the deployment is recorded with them (``sparkrun
    stop`` removes it) and :class:`PartialLaunchError` says what runs where.
    An interruption stops every host.
    """
    recipe = plan.recipe
    ready: list[Placement] = []
    cancelled = threading.Event()
    log_path = store.log_path(plan.name)

    def start_on(host: _HostPlan) -> Placement:
        activity = plan.activities[host.host]
        where = "" if activity is feedback else f" on {host.host}"
        activity.progress(f"Starting {host.argv[0]}{where}", stage="launching", status="running")
        started = time.monotonic()

        def on_started(placement: Placement) -> None:
            activity.progress(
                f"Started {plan.name}{where} (pid {placement.pid})",
                stage="start",
                metrics={"pid": placement.pid},
            )

        spec = LaunchSpec(
            plan.name,
            host.argv,
            {**recipe.env, **trace_environment(activity.operation_id, activity.activity_id)},
            recipe.path.parent,
            plan.port,
            recipe.readiness,
            log_path,
            on_started=on_started,
            on_step=lambda index, total, label: _report_step(activity, label),
            cancelled=cancelled.is_set,
        )

        try:
            with activity.heartbeat(lambda: f"Waiting for {plan.name} to become ready", interval=5.0):
                placement = host.executor.launch(spec)
        except BaseException as error:
            if activity is not feedback:  # the launch's own failure is reported once, by the launch
                activity.error(_first_line(error), stage="readiness", status="failed")
            raise
        ready.append(placement)
        metrics = {"port": plan.port, "pid": placement.pid, "startup_seconds": round(time.monotonic() - started, 3)}
        activity.progress(f"{plan.name} is ready at {placement.url}", stage="ready", metrics=metrics)
        return placement

    with tracker.phase("runtime"):
        tracker.step("runtime", 1, 2, f"starting on {', '.join(plan.names)}")
        try:
            answers = plan.executors.fan_out(start_on, plan.hosts, cancel=cancelled)
        except BaseException:  # interrupted (Ctrl+C, cancel): every host that got ready is stopped again
            plan.executors.fan_out(lambda placement: plan.executors.for_placement(placement).stop(placement), ready)
            raise
        tracker.step("runtime", 2, 2, "ready")
    deployment = Deployment(
        name=plan.name,
        recipe=recipe.name,
        recipe_path=str(recipe.path),
        runtime=recipe.runtime,
        hosts=list(plan.names),
        port=plan.port,
        command=plan.hosts[0].command,
        placements=[answer for answer in answers if isinstance(answer, Placement)],
        operation_id=feedback.operation_id,
        started_at=time.time(),
    )
    failures = {
        host.host: answer for host, answer in zip(plan.hosts, answers, strict=True) if not isinstance(answer, Placement)
    }
    if failures:
        if not deployment.placements:
            if len(failures) == 1:
                raise next(iter(failures.values()))
            details = "; ".join(_host_reason(host, error) for host, error in failures.items())
            raise LaunchError(f"{plan.name} started on none of its {len(failures)} hosts: {details}")
        store.save(deployment)
        raise PartialLaunchError(RunResult.from_record(deployment, state="partial"), failures)
    return deployment


def _report_step(activity: FeedbackReporter, label: str) -> None:
    activity.progress(label, stage="readiness")


def _launch(options: RunOptions, sctx: SparkrunContext, operation: Operation) -> RunResult:
    enabled = options.track_phases if options.track_phases is not None else operation.has_subscribers
    tracker = LaunchPhaseTracker(operation, enabled=enabled)
    feedback = get_feedback(_SOURCE, sctx=sctx)
    store = DeploymentStore(sctx.config.state_dir)
    try:
        with tracker.phase("prepare"):
            plan = _prepare(options, sctx, store, feedback)
        tracker.skip("build", "the process runtime has nothing to build")
        _distribute(plan, tracker, feedback, sctx.config)
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
    return RunResult.from_record(deployment, state="running")


def run(options: RunOptions, *, sctx: SparkrunContext | None = None) -> RunResult:
    """Launch the workload of ``options.recipe`` as one ``run`` operation."""
    sctx = sctx if sctx is not None else initialize()
    with operation_scope(sctx, name="run") as operation:
        result = _launch(options, sctx, operation)
    if options.detached:
        return result
    store = DeploymentStore(sctx.config.state_dir)
    deployment = store.load(result.name)
    executors = Executors(sctx.config)
    try:
        while deployment is not None and executors.state(deployment) != "exited":
            time.sleep(0.2)
    except KeyboardInterrupt:
        return result  # detach: the workload keeps running
    return RunResult.from_record(deployment, state="exited") if deployment is not None else result
