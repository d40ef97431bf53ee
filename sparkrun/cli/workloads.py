"""``sparkrun run|stop|status|logs``: launch and manage workloads."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from sparkrun.cli.options import (
    CliState,
    Command,
    Interrupted,
    UserError,
    events_jsonl_option,
    json_events_option,
    state_dir_option,
)
from sparkrun.cli.session import operation_session

__all__ = ["logs", "parse_sets", "run", "status", "stop"]


def parse_sets(values: tuple[str, ...]) -> dict[str, str]:
    """``--set KEY=VALUE`` items as placeholder overrides."""
    overrides = {}
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        overrides[key.strip()] = value
    return overrides


@click.command(cls=Command)
@click.argument("recipe")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Fill a command placeholder (repeatable).")
@click.option("--port", type=click.IntRange(1, 65535), help="Port for the workload (default: the recipe's, else free).")
@click.option("--name", help="Deployment name (default: the recipe's name).")
@click.option("--foreground", is_flag=True, help="Follow the workload's log after launch; Ctrl+C detaches.")
@json_events_option
@events_jsonl_option
@state_dir_option
@click.pass_context
def run(
    ctx: click.Context,
    recipe: str,
    sets: tuple[str, ...],
    port: int | None,
    name: str | None,
    foreground: bool,
    as_json: bool,
    events_jsonl: Path | None,
    state_dir: Path | None,
) -> None:
    """Launch the workload of RECIPE (a recipe name or a path to a YAML file)."""
    from sparkrun import api

    overrides = parse_sets(sets)
    try:
        with operation_session(ctx, state_dir=state_dir, as_json=as_json, events_jsonl=events_jsonl) as sctx:
            result = api.run(api.RunOptions(recipe=recipe, overrides=overrides, port=port, name=name), sctx=sctx)
    except KeyboardInterrupt:
        raise Interrupted("interrupted; the launch was undone: nothing it started is left running") from None
    if as_json:
        record = {**result.__dict__, "type": "result", "log_path": str(result.log_path)}
        click.echo(json.dumps(record))
    else:
        where = ", ".join(
            f"{url} (pid {pid})" if len(result.hosts) == 1 else f"{host} {url} (pid {pid})"
            for host, url, pid in zip(result.hosts, result.urls, result.pids, strict=True)
        )
        click.echo(f"{result.name} is running at {where}; operation {result.operation_id}")
    if foreground:
        try:
            for line in api.logs(result.name, follow=True, tail=0, sctx=sctx):
                click.echo(line)
        except KeyboardInterrupt:
            click.echo(f"\ndetached: {result.name} keeps running; stop it with `sparkrun stop {result.name}`", err=True)


@click.command(cls=Command)
@click.argument("name", required=False)
@click.option("--all", "stop_all", is_flag=True, help="Stop every running deployment.")
@click.option("--grace", type=click.FloatRange(0, 300), default=5.0, show_default=True, help="Seconds before SIGKILL.")
@events_jsonl_option
@state_dir_option
@click.pass_context
def stop(
    ctx: click.Context,
    name: str | None,
    stop_all: bool,
    grace: float,
    events_jsonl: Path | None,
    state_dir: Path | None,
) -> None:
    """Stop deployment NAME (or --all): its whole process group, gently then firmly.

    Prints one line; -v also shows the events of each stop as they happen.
    """
    from sparkrun import api

    if (name is None) == (not stop_all):
        raise UserError("give a deployment name or --all (not both)")
    verbose = (ctx.find_object(CliState) or CliState()).verbose > 0
    with operation_session(ctx, state_dir=state_dir, events_jsonl=events_jsonl, live=verbose) as sctx:
        results = api.stop(name, all=stop_all, grace=grace, sctx=sctx)
    if not results:
        click.echo("nothing is running")
    elif len(results) == 1:
        click.echo(f"stopped {results[0].name} ({results[0].outcome})")
    else:
        click.echo(f"stopped {len(results)} deployments: " + ", ".join(f"{r.name} ({r.outcome})" for r in results))


@click.command(cls=Command)
@click.option("--json", "as_json", is_flag=True, help="Print deployments as JSON.")
@events_jsonl_option
@state_dir_option
@click.pass_context
def status(ctx: click.Context, as_json: bool, events_jsonl: Path | None, state_dir: Path | None) -> None:
    """Show recorded deployments and whether they are running."""
    from sparkrun import api
    from sparkrun.cli.tables import render_table

    with operation_session(ctx, state_dir=state_dir, events_jsonl=events_jsonl, live=False, traced=False) as sctx:
        deployments = api.status(sctx=sctx)
    if as_json:
        records = [{**d.__dict__, "log_path": str(d.log_path)} for d in deployments]
        click.echo(json.dumps(records, indent=2))
        return
    if not deployments:
        click.echo("no deployments")
        return
    rows = [
        [
            d.name,
            host,
            d.host_states.get(host, d.state),
            str(pid),
            url,
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.started_at)),
            d.recipe,
        ]
        for d in deployments
        for host, pid, url in zip(d.hosts, d.pids, d.urls, strict=True)
    ]
    headers = ["name", "host", "state", "pid", "url", "started", "recipe"]
    click.echo(render_table(headers, rows, right=(3,), flexible=2))


@click.command(cls=Command)
@click.argument("name")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines while the workload runs.")
@click.option("--tail", type=click.IntRange(min=0), help="Start with only the last N lines.")
@click.option("--host", help="Only this host's lines (default: every host's, each line marked [host]).")
@events_jsonl_option
@state_dir_option
@click.pass_context
def logs(
    ctx: click.Context,
    name: str,
    follow: bool,
    tail: int | None,
    host: str | None,
    events_jsonl: Path | None,
    state_dir: Path | None,
) -> None:
    """Print the log of deployment NAME (running, or the last run of a stopped one), from every host."""
    from sparkrun import api

    with operation_session(ctx, state_dir=state_dir, events_jsonl=events_jsonl, live=False, traced=False) as sctx:
        lines = api.logs(name, follow=follow, tail=tail, host=host, sctx=sctx)
    try:
        for line in lines:
            click.echo(line)
    except KeyboardInterrupt:
        pass
