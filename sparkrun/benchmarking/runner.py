"""The benchmark scheduler: a run's tasks, each attempt reported and traced, durable and resumable.

A run is one span (activity ``benchmark.run``), each task of this
invocation a child (``benchmark.task``), and each attempt a child of its
task (source ``benchmark.<framework>``, a fresh activity id) imported with
its real start and duration, its counters following the benchmark contract
and the framework's figures on its final report. The milestones
(``schedule_started``, ``task_start``, ``task_end``, ``results_update``,
``schedule_finished``, ``run_complete``) travel as ``type: "benchmark"``
events; a direct callback gets those and, as ``task_progress``, every
attempt envelope. A recipe target is launched for the run and stopped
after it; a running deployment is used as it is.

Why one module of this size: a session and its attempts share one state
that must stay in step with the disk (a task recorded, then its milestone,
then the next task), and reading the order of those steps in one place is
what makes a resume after any crash safe to reason about. Attempts' processes
live in ``attempts``, run state in ``run_state``, milestones in ``run_events``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkrun.benchmarking.attempts import AttemptRun, run_attempt
from sparkrun.benchmarking.environments import prepare_environment
from sparkrun.benchmarking.framework import (
    BenchmarkFramework,
    Task,
    TaskContext,
    TaskOutcome,
    find_framework,
    load_plugins,
)
from sparkrun.benchmarking.parsers.base import Fields
from sparkrun.benchmarking.requests import BenchmarkRequest, BenchmarkResult, Workloads, benchmark_id, workload
from sparkrun.benchmarking.run_events import BenchmarkCallback, RunEvents
from sparkrun.benchmarking.run_state import RunState, RunStore, Session
from sparkrun.benchmarking.schedule import check_arguments, load_schedule
from sparkrun.core.context import SparkrunContext
from sparkrun.core.operation import Operation
from sparkrun.core.redaction import redactor_of
from sparkrun.core.targets import Target, resolve_target
from sparkrun.core.trace_ids import trace_environment
from sparkrun.errors import BenchmarkError, OperationCancelled
from sparkrun.feedback import get_feedback
from sparkrun.foreign_spans import ForeignSpan, SpanImporter

__all__ = ["resume_benchmark", "run_benchmark"]

#: A framework without a parser: one task counted as 0/1 while it runs, 1/1 or 0 at the end (the contract).
_NO_PARSER_START: dict[str, Any] = {
    "stage": "execution",
    "unit": "tasks",
    "current": 0,
    "total": 1,
    "total_kind": "exact",
}


class _Run:
    """One invocation (``run`` or ``resume``) of a run."""

    def __init__(
        self,
        sctx: SparkrunContext,
        operation: Operation,
        framework: BenchmarkFramework,
        state: RunState,
        store: RunStore,
        callback: BenchmarkCallback | None,
        resumed: bool,
    ) -> None:
        self.sctx, self.operation, self.framework, self.state, self.store = sctx, operation, framework, state, store
        self.events, self.resumed = RunEvents(state.benchmark_id, callback), resumed
        self.feedback = get_feedback("benchmark.run", sctx=sctx)
        self.redactor = redactor_of(operation.processors)

    # -- the run -------------------------------------------------------------------------

    def execute(self, target: Target, overrides: Mapping[str, str], workloads: Workloads) -> BenchmarkResult:
        state = self.state
        todo = [task for task in state.tasks if task["index"] in state.pending]
        session = Session(started_at=time.time(), operation_id=self.operation.operation_id, pid=_pid())
        state.sessions.append(session)
        self.store.save(state)
        self.feedback.progress(
            f"Benchmark {state.benchmark_id}: {len(todo)} of {len(state.tasks)} task(s) with {self.framework.name}",
            stage="run",
            status="running",
            metrics={"benchmark_id": state.benchmark_id, "tasks": len(todo)},
        )
        try:
            environment = prepare_environment(self.framework.requirement, self.feedback)
            state.version = environment.version
            arguments = dict(state.arguments)
            self.framework.check(arguments, environment.bin_dir)
            with workload(target, overrides, workloads) as (base_url, model):
                state.target["model"] = model
                self.events.milestone(
                    "schedule_started",
                    f"Benchmark {state.title}: {len(todo)} task(s)",
                    total_tasks=len(todo),
                    title=state.title,
                )
                for number, task in enumerate(todo):
                    ok = self._task(
                        Task(task["index"], task["label"], task.get("arguments", {})),
                        base_url,
                        model,
                        environment.bin_dir,
                        first=number == 0,
                    )
                    if not ok and state.exit_on_first_failure:
                        break
                self.events.milestone(
                    "schedule_finished", f"Benchmark {state.benchmark_id}: schedule finished", total_tasks=len(todo)
                )
            session.status = "completed" if not state.pending and not state.failed else "partial"
        except (KeyboardInterrupt, OperationCancelled):
            session.status = "interrupted"
            raise
        except BaseException:
            session.status = "partial"
            raise
        finally:
            session.ended_at = time.time()
            self.store.save(state)
            self._consolidate()
            success = session.status == "completed"
            if session.status != "interrupted":
                self.events.milestone(
                    "run_complete",
                    f"Benchmark {state.benchmark_id}: {session.status}",
                    success=success,
                    resumed=self.resumed,
                )
            level_ok = success or session.status == "partial"
            self.feedback.report(
                f"Benchmark {state.benchmark_id}: {session.status} ({len(state.completed)} completed, "
                f"{len(state.failed)} failed, {len(state.pending)} pending)",
                level="progress" if level_ok else "warning",
                stage="run",
                status="succeeded" if success else "failed",
                metrics={
                    "benchmark_id": state.benchmark_id,
                    "completed": len(state.completed),
                    "failed": len(state.failed),
                    "pending": len(state.pending),
                },
            )
        return self.result()

    def _task(self, task: Task, base_url: str, model: str, bin_dir: Path, *, first: bool) -> bool:
        state, framework = self.state, self.framework
        attempt = state.attempts.get(str(task.index), 0) + 1
        state.attempts[str(task.index)] = attempt
        attempt_id = f"{state.benchmark_id}-t{task.index}-a{attempt}"
        ids: dict[str, str | int] = {
            "benchmark_id": state.benchmark_id,
            "task_index": task.index,
            "attempt_id": attempt_id,
        }
        reporter = self.feedback.child(source="benchmark.task")
        reporter.progress(
            f"Task {task.index + 1}/{len(state.tasks)}: {task.label}",
            stage="task",
            status="running",
            metrics={**ids, "label": task.label},
        )
        self.events.milestone("task_start", f"Task {task.index}: {task.label}", index=task.index, label=task.label)
        directory = self.store.task_directory(state.benchmark_id, task.index) / f"attempt-{attempt}"
        context = TaskContext(base_url, model, bin_dir, directory, first, {**state.arguments, **task.arguments})
        spans = SpanImporter(reporter, prefix="benchmark")
        span = ForeignSpan(f"attempt-{attempt}", framework.name, time.time(), attributes=ids)
        parser = framework.parser(task, context)
        start: dict[str, Any] = dict(parser.start() if parser is not None else _NO_PARSER_START)
        self.events.progress(task.index, spans.started(span, **start))
        attempt_reporter = spans.reporter(span.id)

        def on_fields(fields: Fields) -> None:
            report: dict[str, Any] = dict(fields)
            message = str(report.pop("message", "") or f"{framework.name}: task {task.label}")
            report["metrics"] = {**(report.get("metrics") or {}), **ids}
            self.events.progress(task.index, attempt_reporter.report(message, **report))

        try:
            run = run_attempt(
                framework.command(task, context),
                directory=directory,
                environment={
                    **framework.environment(context),
                    **trace_environment(attempt_reporter.operation_id, attempt_reporter.activity_id),
                },
                timeout=state.task_timeout,
                parser=parser,
                on_fields=on_fields,
                redact=self.redactor.text,
            )
        except (KeyboardInterrupt, OperationCancelled):
            duration = time.time() - span.started_at
            self.events.progress(task.index, spans.finished(span.completed(duration, failed=True, error="interrupted")))
            reporter.warning(f"Task {task.label}: interrupted", status="failed")
            raise
        outcome, error = self._outcome(task, context, run)
        success = error is None
        final: dict[str, Any] = dict(
            parser.finish(outcome.raw if outcome is not None else None, success=success)
            if parser is not None
            else {**_NO_PARSER_START, "current": 1 if success else 0}
        )
        final.pop("status", None)
        final.pop("level", None)
        figures = dict(outcome.figures) if outcome is not None else {}
        # the framework's figures first (span attributes, dashboards), the parser's live metrics in what room is left
        final["metrics"] = {**_metric_figures(figures), **(final.get("metrics") or {})}
        if error is not None:
            final["message"] = f"{framework.name} {task.label}: {error}"
        done = span.completed(run.duration_seconds, failed=not success, error=error)
        self.events.progress(task.index, spans.finished(done, **final))
        self._record(task, attempt, attempt_id, success, run.duration_seconds, outcome, error)
        if success:
            reporter.progress(f"Task {task.label}: {outcome.summary if outcome else 'done'}", status="succeeded")
        else:
            reporter.error(f"Task {task.label} failed: {error}", status="failed")
        return success

    def _outcome(self, task: Task, context: TaskContext, run: AttemptRun) -> tuple[TaskOutcome | None, str | None]:
        """What the attempt measured, or why it counts as failed."""
        framework = self.framework
        if run.timed_out:
            return None, f"timed out after {self.state.task_timeout:g} s"
        if run.exit_code != 0:
            return None, f"{framework.name} exited with code {run.exit_code} (log: {context.directory / 'log.txt'})"
        try:
            outcome = framework.outcome(task, context)
        except ValueError as problem:
            return None, f"its result could not be read: {problem}"
        if not outcome.measured:
            return outcome, f"{framework.name} measured nothing" + (f": {outcome.summary}" if outcome.summary else "")
        return outcome, None

    def _record(
        self,
        task: Task,
        attempt: int,
        attempt_id: str,
        success: bool,
        duration: float,
        outcome: TaskOutcome | None,
        error: str | None,
    ) -> None:
        state = self.state
        (state.completed if success else state.failed).append(task.index)
        if success and task.index in state.failed:
            state.failed.remove(task.index)
        result = {
            "index": task.index,
            "label": task.label,
            "outcome": "succeeded" if success else "failed",
            "attempt": attempt,
            "attempt_id": attempt_id,
            "duration_seconds": round(duration, 6),
            "figures": dict(outcome.figures) if outcome is not None else {},
            "rows": [dict(row) for row in outcome.rows] if outcome is not None else [],
            "summary": outcome.summary if outcome is not None else "",
            "error": error,
        }
        self.store.save_task_result(state.benchmark_id, task.index, result)
        self.store.save(state)
        self.events.milestone(
            "task_end",
            f"Task {task.index}: {task.label}: {'succeeded' if success else 'failed'}",
            index=task.index,
            success=success,
            duration_s=round(duration, 6),
            label=task.label,
            attempt_id=attempt_id,
            framework=self.framework.name,
        )
        self.events.milestone("results_update", f"Results of {state.benchmark_id} updated", results=self._results())

    def _results(self) -> dict[str, Any]:
        state = self.state
        return {
            "benchmark_id": state.benchmark_id,
            "framework": state.framework,
            "version": state.version,
            "model": state.target.get("model", ""),
            "tasks": self.store.task_results(state),
        }

    def _consolidate(self) -> None:
        self.store.save_results(self.state, self._results())

    def result(self) -> BenchmarkResult:
        state = self.state
        return BenchmarkResult(
            benchmark_id=state.benchmark_id,
            framework=state.framework,
            version=state.version,
            model=str(state.target.get("model", "")),
            status=state.status,
            resumed=self.resumed,
            operation_id=self.operation.operation_id,
            tasks=self.store.task_results(state),
            completed=len(state.completed),
            failed=len(state.failed),
            pending=len(state.pending),
        )


def _pid() -> int:
    import os

    return os.getpid()


def _metric_figures(figures: Mapping[str, Any]) -> dict[str, Any]:
    return {f"result.{key}": value for key, value in list(figures.items())[:24]}


def run_benchmark(
    sctx: SparkrunContext,
    operation: Operation,
    request: BenchmarkRequest,
    workloads: Workloads,
    callback: BenchmarkCallback | None = None,
) -> BenchmarkResult:
    """Start (or start over) the run ``request`` describes, inside ``operation``."""
    load_plugins(sctx)
    framework = find_framework(request.framework)
    if not 0 < request.task_timeout <= 7 * 86_400:
        raise BenchmarkError(f"task_timeout is {request.task_timeout}; it must be seconds in (0, 604800]")
    schedule = load_schedule(request.schedule, framework)
    arguments = {**schedule.get("arguments", {}), **check_arguments(framework, request.arguments, "--arg")}
    tasks = framework.tasks(arguments, schedule)
    target = resolve_target(request.target, sctx)
    run_id = benchmark_id(framework, arguments, schedule, target, request.overrides)
    store = RunStore(sctx.config.state_dir)
    with store.locked(run_id):
        previous = store.load(run_id) if store.exists(run_id) else None
        state = RunState(
            benchmark_id=run_id,
            framework=framework.name,
            requirement=framework.requirement,
            title=str(schedule.get("title") or f"{framework.name} on {target.workload}"),
            target={
                "workload": target.workload,
                "recipe": str(target.recipe.path),
                "deployment": target.deployment is not None,
                "overrides": dict(request.overrides),
            },
            arguments=dict(arguments),
            schedule={k: v for k, v in schedule.items() if k != "arguments"},
            tasks=[task.to_json() for task in tasks],
            task_timeout=float(request.task_timeout),
            exit_on_first_failure=request.exit_on_first_failure,
            created_at=time.time(),
            sessions=previous.sessions if previous else [],
            crashes=previous.crashes if previous else 0,
            attempts=previous.attempts if previous else {},
        )
        return _Run(sctx, operation, framework, state, store, callback, resumed=False).execute(
            target, request.overrides, workloads
        )


def resume_benchmark(
    sctx: SparkrunContext,
    operation: Operation,
    benchmark_id: str,
    workloads: Workloads,
    callback: BenchmarkCallback | None = None,
) -> BenchmarkResult:
    """Run the failed and pending tasks of an earlier run again."""
    load_plugins(sctx)
    store = RunStore(sctx.config.state_dir)
    with store.locked(benchmark_id):
        state = store.load(benchmark_id)
        if not state.pending and not state.failed:
            raise BenchmarkError(f"the run has nothing left to do (benchmark_id={benchmark_id}, all tasks completed)")
        state.failed = []  # retried now
        framework = find_framework(state.framework)
        if framework.requirement != state.requirement:
            raise BenchmarkError(
                f"the run used {state.requirement}, this sparkrun schedules {framework.requirement}; start a new run"
            )
        target = resolve_target(
            str(state.target.get("recipe") if not state.target.get("deployment") else state.target["workload"]), sctx
        )
        return _Run(sctx, operation, framework, state, store, callback, resumed=True).execute(
            target, state.target.get("overrides", {}), workloads
        )
