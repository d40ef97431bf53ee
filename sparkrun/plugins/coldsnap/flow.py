"""One ColdSnap operation, end to end: request, controller run(s), receipt checks, what the user learns.

``restore`` is a launch and reports the launch phases: *prepare* runs the
controller with ``--prepare-only`` (its preparation stages are the phase's
steps), *runtime* evicts the workload sparkrun runs under that name and runs
the real restore, *post_launch* reports the startup measurements. The other
operations run the controller once. Every invocation keeps its receipt and
timing stream under ``<state_dir>/coldsnap/runs/<operation id>/``.

The receipt is authoritative: a present receipt is checked before the exit
code, and its hard errors fail the operation with the field named; timing
stream problems are warnings. Spans the stream did not complete but the
receipt has are imported from the receipt.
"""

from __future__ import annotations

import re
import shutil
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrun.core.context import SparkrunContext
from sparkrun.core.deployments import DeploymentStore
from sparkrun.core.executors import Executors
from sparkrun.core.launch_progress import LaunchPhaseTracker
from sparkrun.core.operation import Operation
from sparkrun.core.redaction import Redactor, redactor_of
from sparkrun.core.targets import Target, resolve_target
from sparkrun.core.trace_ids import trace_environment
from sparkrun.errors import ColdSnapError
from sparkrun.feedback import FeedbackReporter, get_feedback
from sparkrun.plugins.coldsnap.canonical import request_text
from sparkrun.plugins.coldsnap.controller import ControllerRun, run_controller
from sparkrun.plugins.coldsnap.receipt import (
    STARTUP_OBSERVATION,
    Receipt,
    check_preparation,
    check_receipt,
    read_receipt,
    startup_measurements,
    stream_warnings,
)
from sparkrun.plugins.coldsnap.request import OPERATIONS, artifact_path, build_request, request_digest
from sparkrun.plugins.coldsnap.settings import ColdSnapSettings, resolve_settings
from sparkrun.plugins.coldsnap.spans import PREPARATION_STAGES, ControllerSpans

__all__ = ["KEPT_RUNS", "ColdSnapError", "ColdSnapResult", "run_coldsnap"]

SOURCE = "coldsnap"
#: Receipts and timing streams of this many past operations are kept; older ones are deleted.
KEPT_RUNS = 20


@dataclass(frozen=True)
class ColdSnapResult:
    """What a ColdSnap operation did. The receipt, when there is one, is the authority for ``state``."""

    operation: str
    workload: str
    state: str
    request_id: str
    request_sha256: str
    operation_id: str
    exit_code: int | None
    receipt_path: str | None
    artifact: str | None
    spans: int
    warnings: tuple[str, ...] = ()
    startup: dict[str, float] = field(default_factory=dict)
    prepared: dict[str, Any] | None = None
    duration_seconds: float | None = None


#: Environment variables whose values are treated as secrets: redacted from everything the controller sends back.
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|PASS|KEY|CREDENTIAL|AUTH", re.IGNORECASE)
_MIN_SECRET_CHARS = 4  # shorter values would mask unrelated text


def _guard(redactor: Redactor, request: dict[str, Any]) -> None:
    """Teach the redactor the request's secret-looking environment values."""
    for unit in request.get("launch", {}).get("units", []):
        for name, value in unit.get("environment", {}).items():
            if _SECRET_NAME.search(name) and len(value) >= _MIN_SECRET_CHARS:
                redactor.add(value)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:400] if lines else ""


class _Invocation:
    """One controller run: its activity, its spans, its checks."""

    def __init__(
        self,
        feedback: FeedbackReporter,
        settings: ColdSnapSettings,
        request: dict[str, Any],
        directory: Path,
    ) -> None:
        self.feedback, self.settings, self.request, self.directory = feedback, settings, request, directory
        self.spans = 0

    def run(self, *, prepare_only: bool, on_stage: Any = None) -> tuple[ControllerRun, Receipt | None, list[str]]:
        operation = self.request["operation"]
        phase = "prepare" if prepare_only else "execute"
        reporter = self.feedback.child(source=f"{SOURCE}.{operation}")
        flag = " --prepare-only" if prepare_only else ""
        reporter.progress(f"Running the controller: {operation}{flag}", stage=phase, status="running")
        spans = ControllerSpans(reporter, self.request, on_stage=on_stage)

        def counted(record: Any) -> None:
            if record.event == "span_complete":
                self.spans += 1
            spans(record)

        run = run_controller(
            self.settings.controller,
            operation,
            request_text(self.request),
            self.directory / phase,
            operation_id=self.request["id"],
            on_record=counted,
            prepare_only=prepare_only,
            cancel_grace=self.settings.cancel_grace_seconds,
            environment=trace_environment(reporter.operation_id, reporter.activity_id),
            on_cancel=lambda text: reporter.warning(text, stage="cancel"),
        )
        try:
            receipt = self._checked(run, reporter)
        except ColdSnapError as error:
            reporter.error(str(error), status="failed", metrics={"error_type": "ColdSnapError"})
            raise
        warnings = (
            stream_warnings(
                receipt,
                run.stream,
                run.stream_error,
                prepare_only=prepare_only,
                request_sha256=request_digest(self.request),
            )
            if receipt is not None
            else []
        )
        if receipt is None:  # tolerated: the exit code is the outcome
            warnings.append(
                f"The controller wrote no receipt: its exit code ({run.exit_code}) is the outcome, "
                "and its spans are only what the timing stream delivered."
            )
            if run.stream_error is not None:
                warnings.append(f"The timing stream could not be read to its end: {run.stream_error}.")
        if receipt is not None:
            spans.add_clocks(receipt.clocks)
            self.spans += spans.complete_missing(list(receipt.spans))
        for warning in warnings:
            reporter.warning(warning, stage="checks")
        if receipt is not None and receipt.state == "failed":
            detail = receipt.error_message or "no error given"
            message = f"the controller's {operation}{flag} failed: {detail}"
            reporter.error(message, status="failed", metrics={"error_type": "ColdSnapError"})
            raise ColdSnapError(message)
        metrics: dict[str, Any] = {"exit_code": run.exit_code}
        if receipt is not None:
            metrics["duration_seconds"] = receipt.duration_seconds
        reporter.progress(
            f"The controller's {operation}{flag} succeeded", stage=phase, status="succeeded", metrics=metrics
        )
        return run, receipt, warnings

    def _checked(self, run: ControllerRun, reporter: FeedbackReporter) -> Receipt | None:
        """The receipt, checked before the exit code (a missing one is tolerated)."""
        receipt = read_receipt(run.receipt_path)
        if receipt is not None:
            check_receipt(receipt, request=self.request, exit_code=run.exit_code or 0)
        elif run.exit_code != 0:
            detail = _last_line(run.stderr_tail)
            raise ColdSnapError(
                f"the ColdSnap controller exited with code {run.exit_code} and wrote no receipt"
                + (f": {detail}" if detail else "")
            )
        return receipt


def _runs_dir(sctx: SparkrunContext) -> Path:
    return sctx.config.state_dir / "coldsnap" / "runs"


def _prune(runs: Path) -> None:
    kept = sorted((p for p in runs.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[KEPT_RUNS:]:
        shutil.rmtree(old, ignore_errors=True)


def _evict(target: Target, sctx: SparkrunContext, feedback: FeedbackReporter) -> str:
    """Stop the deployment sparkrun runs under the workload's name, if any (the controller replaces its own)."""
    store = DeploymentStore(sctx.config.state_dir)
    executors = Executors(sctx.config)
    deployment = store.load(target.workload)
    if deployment is None or executors.state(deployment) == "exited":
        return "nothing to evict"
    outcomes = []
    for placement in deployment.placements:
        activity = feedback.child(source=f"{SOURCE}.evict", host=placement.host)
        activity.progress(f"Evicting {deployment.name} (pid {placement.pid})", stage="evict", status="running")
        outcome = executors.for_placement(placement).stop(placement, grace=5.0)
        activity.progress(f"Evicted {deployment.name}: {outcome}", stage="evict", status="succeeded")
        outcomes.append(outcome)
    store.remove(deployment.name)
    return f"evicted {deployment.name} ({', '.join(sorted(set(outcomes)))})"


def run_coldsnap(
    sctx: SparkrunContext,
    operation: Operation,
    name: str,
    target_reference: str,
    *,
    controller: str | None = None,
    snapshot_driver: str | None = None,
) -> ColdSnapResult:
    """Run ColdSnap operation ``name`` on a recipe or running deployment, inside ``operation``."""
    if name not in OPERATIONS:
        raise ValueError(f"operation is {name!r}; it must be one of {', '.join(OPERATIONS)}")
    feedback = get_feedback(SOURCE, sctx=sctx)
    redactor = redactor_of(operation.processors)  # api.coldsnap gives it one
    tracker = LaunchPhaseTracker(operation, enabled=name == "restore" and operation.has_subscribers)
    try:
        with tracker.phase("prepare") if name == "restore" else nullcontext():
            target = resolve_target(target_reference, sctx)
            settings = resolve_settings(
                target.recipe,
                sctx.config,
                workload=target.workload,
                controller=controller,
                snapshot_driver=snapshot_driver,
            )
            request = build_request(name, target, settings)
            digest = request_digest(request)
            feedback.progress(
                f"ColdSnap {name} of {target.workload} (request {request['id']})",
                stage=name,
                status="running",
                metrics={
                    "request_id": request["id"],
                    "request_sha256": digest,
                    "snapshot_driver": settings.snapshot_driver,
                },
            )
            runs = _runs_dir(sctx)
            runs.mkdir(parents=True, exist_ok=True)
            _prune(runs)
            _guard(redactor, request)
            invocation = _Invocation(feedback, settings, request, runs / operation.operation_id)
            prepared = None
            if name == "restore":
                steps = len(PREPARATION_STAGES)
                run, _, warnings = invocation.run(
                    prepare_only=True, on_stage=lambda index, stage: tracker.step("prepare", index, steps, stage)
                )
                prepared = check_preparation(run.stdout, request=request)
        if name == "restore":
            tracker.skip("build", "a snapshot restore builds nothing")
            tracker.skip("distribute", "the controller reads the artifact itself")
            tracker.skip("tuning", "the snapshot holds the tuned state")
            with tracker.phase("runtime"):
                tracker.step("runtime", 1, 2, _evict(target, sctx, feedback))
                tracker.step("runtime", 2, 2, "restoring")
                run, receipt, more = invocation.run(prepare_only=False)
                warnings = [*warnings, *more]
        else:
            run, receipt, warnings = invocation.run(prepare_only=False)
        startup = startup_measurements(receipt) if receipt is not None else {}
        with tracker.phase("post_launch") if name == "restore" else nullcontext():
            metrics: dict[str, Any] = {"spans": invocation.spans, "warnings": len(warnings)}
            if startup:
                metrics = {"observation": STARTUP_OBSERVATION, **startup, **metrics}
            feedback.progress(
                _summary(name, target.workload, startup, warnings), stage=name, status="succeeded", metrics=metrics
            )
    except BaseException as error:
        reason = (str(error).splitlines() or [""])[0] or type(error).__name__
        feedback.error(reason, status="failed", metrics={"error_type": type(error).__name__})
        if isinstance(error, ColdSnapError) and redactor.text(str(error)) != str(error):
            raise type(error)(redactor.text(str(error))) from None  # what the controller said may hold a secret
        raise
    location = artifact_path(settings, name)
    return ColdSnapResult(
        operation=name,
        workload=target.workload,
        state=receipt.state if receipt is not None else "succeeded",
        request_id=request["id"],
        request_sha256=digest,
        operation_id=operation.operation_id,
        exit_code=run.exit_code,
        receipt_path=str(run.receipt_path) if receipt is not None else None,
        artifact=str(location) if location is not None else None,
        spans=invocation.spans,
        warnings=tuple(warnings),
        startup=startup,
        prepared=prepared,
        duration_seconds=receipt.duration_seconds if receipt is not None else None,
    )


def _summary(name: str, workload: str, startup: dict[str, float], warnings: list[str]) -> str:
    text = f"ColdSnap {name} of {workload} succeeded"
    if "ttr_http_ready_s" in startup:
        text += f"; ready in {startup['ttr_http_ready_s']:.3f} s"
    if warnings:
        text += f" ({len(warnings)} warning{'s' if len(warnings) > 1 else ''})"
    return text
