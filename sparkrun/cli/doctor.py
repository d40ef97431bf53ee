"""``sparkrun doctor``: the environment checks, as an observed operation."""

from __future__ import annotations

from pathlib import Path

import click

from sparkrun.cli.main import CliState, state_dir_option
from sparkrun.cli.session import events_jsonl_option, operation_session

__all__ = ["doctor"]


@click.command()
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print events as JSON lines.")
@events_jsonl_option
@click.pass_context
def doctor(ctx: click.Context, state_dir: Path | None, as_json: bool, events_jsonl: Path | None) -> None:
    """Check that this machine can run and observe operations."""
    from sparkrun.diagnostics import run_diagnostics

    with operation_session(ctx, state_dir=state_dir, as_json=as_json, events_jsonl=events_jsonl) as sctx:
        results = run_diagnostics(sctx, telemetry=ctx.find_object(CliState).otel)
    if not all(result.ok for result in results):
        ctx.exit(1)
