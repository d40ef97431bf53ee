"""``sparkrun trace``: look up operations in the local trace store, replay events."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from sparkrun.cli.options import CliState, Group, UserError, resolved_state_dir, state_dir_option

if TYPE_CHECKING:
    from otel.local_store import TraceStore

__all__ = ["trace"]

_OPERATION_ID = re.compile(r"[0-9a-fA-F]{32}")


def _store(state_dir: Path | None) -> TraceStore:
    from otel.local_store import TraceStore

    return TraceStore.in_state_dir(resolved_state_dir(state_dir))


@click.group(cls=Group)
def trace() -> None:
    """Find an operation's trace by its operation id."""


@trace.command("list")
@state_dir_option
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True, help="How many traces.")
@click.option("--json", "as_json", is_flag=True, help="Print the traces as JSON.")
def list_traces(state_dir: Path | None, limit: int, as_json: bool) -> None:
    """Recent operations in the local trace store, newest first (by start time)."""
    from otel.span_tree import format_duration
    from sparkrun.cli.tables import render_table

    store = _store(state_dir)
    summaries = store.summaries(limit)
    if as_json:
        click.echo(json.dumps([summary.to_json() for summary in summaries], indent=2))
        return
    if not summaries:
        click.echo(f"no traces in {store.directory}")
        return
    rows = [
        [
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(summary.start_ns / 1e9)),
            format_duration(summary.duration_seconds),
            summary.status,
            str(summary.span_count),
            summary.trace_id,
            summary.name,
        ]
        for summary in summaries
    ]
    header = ["started", "duration", "status", "spans", "operation id", "operation"]
    click.echo(render_table(header, rows, right=(1, 3)))


@trace.command("show")
@click.argument("operation_id")
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the span tree as JSON.")
def show(operation_id: str, state_dir: Path | None, as_json: bool) -> None:
    """Show the span tree of OPERATION_ID (or `latest`) as a waterfall."""
    from otel.span_tree import span_tree
    from sparkrun.cli.tables import terminal_width
    from sparkrun.cli.waterfall import render_waterfall

    store = _store(state_dir)
    if operation_id == "latest":
        recent = store.trace_ids()
        if not recent:
            raise UserError(f"the local trace store is empty (path={store.directory})")
        operation_id = recent[0]
    elif not _OPERATION_ID.fullmatch(operation_id):
        raise UserError(f"not an operation id (operation_id={operation_id!r}, expected 32 hex characters or 'latest')")
    spans = store.spans(operation_id.lower())
    if not spans:
        raise UserError(
            f"no trace for this operation in the local store (operation_id={operation_id}, path={store.directory})"
        )
    if as_json:
        click.echo(json.dumps({"trace_id": operation_id.lower(), "spans": span_tree(spans)}, indent=2))
    else:
        click.echo(f"trace {operation_id.lower()}")
        click.echo(render_waterfall(spans, width=terminal_width()))


@trace.command("replay")
@click.argument("events_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@state_dir_option
@click.option("--endpoint", help="OTLP endpoint to export to (default: the environment's, else the local store).")
@click.option(
    "--protocol", type=click.Choice(["http/protobuf", "grpc"]), help="OTLP protocol (default: the environment's)."
)
@click.option("--name", default="replay", show_default=True, help="Operation name for the root span.")
@click.pass_context
def replay(
    ctx: click.Context, events_file: Path, state_dir: Path | None, endpoint: str | None, protocol: str | None, name: str
) -> None:
    """Rebuild spans from recorded events (JSON lines) and export them.

    Replaying the same events again produces the same trace and span ids.
    """
    from otel.event_replay import read_events
    from sparkrun.cli.telemetry import export_replay

    events = list(read_events(events_file))
    if not events:
        raise UserError(f"no events to replay (path={events_file})")
    operation_ids, destination = export_replay(
        events,
        state=ctx.find_object(CliState),
        state_dir=resolved_state_dir(state_dir),
        endpoint=endpoint,
        protocol=protocol,
        name=name,
    )
    for operation_id in operation_ids:
        click.echo(f"replayed operation {operation_id} -> {destination}")
