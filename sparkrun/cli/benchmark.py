"""``sparkrun benchmark run|resume|status|results|list``: scheduled benchmark runs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import click

from sparkrun.cli.options import (
    Group,
    Interrupted,
    UserError,
    events_jsonl_option,
    json_events_option,
    state_dir_option,
)
from sparkrun.cli.session import operation_session

__all__ = ["benchmark"]

#: Figures the results table shows first, when a framework reports them.
_HEADLINE = (
    "pp_tokens_per_second",
    "tg_tokens_per_second",
    "ttft_ms",
    "score",
    "scenarios_passed",
    "scenarios_partial",
    "scenarios_failed",
)
_MAX_FIGURE_COLUMNS = 4


@click.group(cls=Group)
def benchmark() -> None:
    """Run benchmark frameworks against a workload, durably and resumably."""


def _figure_text(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value)


def results_table(tasks: list[dict[str, Any]]) -> str:
    """Per task: label, outcome, attempts, duration and the framework's headline figures."""
    from otel.span_tree import format_duration
    from sparkrun.cli.tables import render_table

    names: list[str] = []
    for task in tasks:
        for name in task.get("figures", {}):
            if name not in names:
                names.append(name)
    ordered = [n for n in _HEADLINE if n in names] + [n for n in names if n not in _HEADLINE]
    shown = ordered[:_MAX_FIGURE_COLUMNS]
    rows = []
    for task in tasks:
        figures = task.get("figures", {})
        rows.append(
            [
                task["label"],
                task["outcome"],
                str(task.get("attempt", "")),
                format_duration(float(task.get("duration_seconds", 0.0))),
                *(_figure_text(figures[name]) if name in figures else "-" for name in shown),
                task.get("error") or task.get("summary") or "",
            ]
        )
    header = ["task", "outcome", "attempt", "duration", *shown, "note"]
    return render_table(header, rows, right=tuple(range(2, 4 + len(shown))))


def _finish(result: Any, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"type": "result", **result.__dict__}))
    else:
        if result.tasks:
            click.echo(results_table(result.tasks))
        click.echo(
            f"benchmark {result.benchmark_id} ({result.framework} {result.version}): {result.status}; "
            f"{result.completed} completed, {result.failed} failed, {result.pending} pending; "
            f"operation {result.operation_id}"
        )
    if result.status != "completed":
        hint = f"sparkrun benchmark resume {result.benchmark_id}"
        raise UserError(f"not every task succeeded (benchmark_id={result.benchmark_id}); retry with `{hint}`")


@benchmark.command()
@click.argument("target")
@click.option("--framework", required=True, metavar="NAME", help="llama-benchy, tool-eval-bench or a plugin's.")
@click.option("--schedule", type=click.Path(dir_okay=False, path_type=Path), help="A schedule file (YAML).")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Fill a recipe placeholder (repeatable).")
@click.option("--arg", "args", multiple=True, metavar="NAME=VALUE", help="A framework argument (kebab-case flag).")
@click.option(
    "--task-timeout",
    type=click.FloatRange(1, 604_800),
    default=3600.0,
    show_default=True,
    help="Seconds before an attempt is stopped as failed.",
)
@click.option("--exit-on-first-failure", is_flag=True, help="Stop the run at its first failed task.")
@json_events_option
@events_jsonl_option
@state_dir_option
@click.pass_context
def run(
    ctx: click.Context,
    target: str,
    framework: str,
    schedule: Path | None,
    sets: tuple[str, ...],
    args: tuple[str, ...],
    task_timeout: float,
    exit_on_first_failure: bool,
    as_json: bool,
    events_jsonl: Path | None,
    state_dir: Path | None,
) -> None:
    """Benchmark TARGET (a running deployment, or a recipe launched for the run and stopped after)."""
    from sparkrun import api
    from sparkrun.benchmarking.schedule import parse_arguments
    from sparkrun.cli.workloads import parse_sets

    request = api.BenchmarkRequest(
        target=target,
        framework=framework,
        schedule=str(schedule) if schedule is not None else None,
        overrides=parse_sets(sets),
        arguments=parse_arguments(args),
        task_timeout=task_timeout,
        exit_on_first_failure=exit_on_first_failure,
    )
    try:
        with operation_session(ctx, state_dir=state_dir, as_json=as_json, events_jsonl=events_jsonl) as sctx:
            result = api.benchmark(request, sctx=sctx)
    except KeyboardInterrupt:
        raise Interrupted(
            "interrupted; the run is marked interrupted: `sparkrun benchmark resume` continues it"
        ) from None
    _finish(result, as_json)


@benchmark.command()
@click.argument("benchmark_id")
@json_events_option
@events_jsonl_option
@state_dir_option
@click.pass_context
def resume(
    ctx: click.Context, benchmark_id: str, as_json: bool, events_jsonl: Path | None, state_dir: Path | None
) -> None:
    """Retry the failed and pending tasks of run BENCHMARK_ID."""
    from sparkrun import api

    try:
        with operation_session(ctx, state_dir=state_dir, as_json=as_json, events_jsonl=events_jsonl) as sctx:
            result = api.benchmark_resume(benchmark_id, sctx=sctx)
    except KeyboardInterrupt:
        raise Interrupted("interrupted; the run is marked interrupted: resume it again to continue") from None
    _finish(result, as_json)


def _latest(sctx: Any, benchmark_id: str | None) -> str:
    from sparkrun import api

    if benchmark_id not in (None, "latest"):
        return str(benchmark_id)
    runs = api.benchmark_runs(sctx=sctx)
    if not runs:
        raise UserError("no benchmark runs yet; start one with `sparkrun benchmark run TARGET --framework NAME`")
    return runs[0].benchmark_id


@benchmark.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON.")
@state_dir_option
@click.pass_context
def list_runs(ctx: click.Context, as_json: bool, state_dir: Path | None) -> None:
    """List benchmark runs, most recent first."""
    from sparkrun import api
    from sparkrun.cli.tables import render_table

    with operation_session(ctx, state_dir=state_dir, live=False, traced=False) as sctx:
        runs = api.benchmark_runs(sctx=sctx)
    if as_json:
        click.echo(json.dumps([run.to_json() for run in runs], indent=2))
        return
    if not runs:
        click.echo("no benchmark runs")
        return
    rows = [
        [
            run.benchmark_id,
            run.framework,
            run.status,
            f"{len(run.completed)}/{len(run.tasks)}",
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(run.created_at)),
            run.title,
        ]
        for run in runs
    ]
    click.echo(render_table(["benchmark", "framework", "status", "done", "created", "title"], rows, right=(3,)))


@benchmark.command()
@click.argument("benchmark_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the run's state as JSON.")
@state_dir_option
@click.pass_context
def status(ctx: click.Context, benchmark_id: str | None, as_json: bool, state_dir: Path | None) -> None:
    """Show a run's tasks and sessions (the latest run by default)."""
    from sparkrun import api
    from sparkrun.cli.tables import render_table

    with operation_session(ctx, state_dir=state_dir, live=False, traced=False) as sctx:
        state, results = api.benchmark_state(_latest(sctx, benchmark_id), sctx=sctx)
    if as_json:
        click.echo(json.dumps({**state.to_json(), "results": results}, indent=2))
        return
    outcome = {r["index"]: r for r in results}
    rows = []
    for task in state.tasks:
        index = task["index"]
        done = "completed" if index in state.completed else "failed" if index in state.failed else "pending"
        rows.append(
            [
                str(index),
                task["label"],
                done,
                str(state.attempts.get(str(index), 0)),
                (outcome.get(index) or {}).get("error") or "",
            ]
        )
    click.echo(f"benchmark {state.benchmark_id}: {state.title} ({state.framework} {state.version}), {state.status}")
    click.echo(render_table(["#", "task", "state", "attempts", "last error"], rows, right=(0, 3)))
    sessions = [
        [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.started_at)), s.status, s.operation_id]
        for s in state.sessions
    ]
    if sessions:
        click.echo(render_table(["session", "status", "operation"], sessions))
    if state.crashes:
        click.echo(f"{state.crashes} session(s) crashed")


@benchmark.command()
@click.argument("benchmark_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the consolidated results as JSON.")
@state_dir_option
@click.pass_context
def results(ctx: click.Context, benchmark_id: str | None, as_json: bool, state_dir: Path | None) -> None:
    """Show a run's results table (the latest run by default)."""
    from sparkrun import api

    with operation_session(ctx, state_dir=state_dir, live=False, traced=False) as sctx:
        state, tasks = api.benchmark_state(_latest(sctx, benchmark_id), sctx=sctx)
    if as_json:
        model = state.target.get("model", "")
        click.echo(
            json.dumps(
                {
                    "benchmark_id": state.benchmark_id,
                    "framework": state.framework,
                    "version": state.version,
                    "model": model,
                    "tasks": tasks,
                },
                indent=2,
            )
        )
        return
    if not tasks:
        click.echo(f"benchmark {state.benchmark_id}: no results yet")
        return
    click.echo(results_table(tasks))


@benchmark.command()
@click.argument("frameworks", nargs=-1, metavar="[FRAMEWORK]...")
@state_dir_option
@click.pass_context
def setup(ctx: click.Context, frameworks: tuple[str, ...], state_dir: Path | None) -> None:
    """Install the frameworks' environments now (every known framework by default).

    Runs install them on first use anyway; this does it ahead, for instance
    before going offline. The cache is SPARKRUN_BENCHMARK_ENVS, else
    $XDG_CACHE_HOME/sparkrun/benchmark-envs.
    """
    from sparkrun import api

    with operation_session(ctx, state_dir=state_dir, traced=False) as sctx:
        environments = api.benchmark_setup(list(frameworks) or None, sctx=sctx)
    for environment in environments:
        if environment.requirement:
            click.echo(f"{environment.requirement}: {environment.version} in {environment.path}")
