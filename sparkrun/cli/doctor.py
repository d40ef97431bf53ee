"""``sparkrun doctor``: the environment checks, as an observed operation."""

from __future__ import annotations

from pathlib import Path

import click

from sparkrun.cli.options import CliState, Command, events_jsonl_option, state_dir_option
from sparkrun.cli.session import operation_session

__all__ = ["doctor"]


@click.command(cls=Command)
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print events as JSON lines.")
@events_jsonl_option
@click.pass_context
def doctor(ctx: click.Context, state_dir: Path | None, as_json: bool, events_jsonl: Path | None) -> None:
    """Check that this machine can run and observe operations (exit 1 if a check fails)."""
    from sparkrun.cli.tables import render_table
    from sparkrun.diagnostics import run_diagnostics

    state = ctx.find_object(CliState) or CliState()
    live = state.verbose > 0
    with operation_session(ctx, state_dir=state_dir, as_json=as_json, events_jsonl=events_jsonl, live=live) as sctx:
        results = run_diagnostics(sctx, telemetry=state.otel)
    if not as_json:
        rows = [
            [result.name, "ok" if result.status == "succeeded" else result.status, result.detail] for result in results
        ]
        click.echo(render_table(["check", "status", "detail"], rows))
    if not all(result.ok for result in results):
        ctx.exit(1)
