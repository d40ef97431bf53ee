"""``sparkrun trace``: look up operations in the local trace store, replay events."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import click

from sparkrun.cli.main import UserError, resolved_state_dir, state_dir_option

__all__ = ["trace"]

_OPERATION_ID = re.compile(r"[0-9a-fA-F]{32}")


def _store(state_dir: Path | None):  # type: ignore[no-untyped-def]
    from otel.local_store import TraceStore

    return TraceStore.in_state_dir(resolved_state_dir(state_dir))


@click.group()
def trace() -> None:
    """Find an operation's trace by its operation id."""


@trace.command("list")
@state_dir_option
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True, help="How many traces.")
def list_traces(state_dir: Path | None, limit: int) -> None:
    """Recent operations in the local trace store, newest first."""
    store = _store(state_dir)
    summaries = store.summaries(limit)
    if not summaries:
        click.echo(f"no traces in {store.directory}")
        return
    click.echo(f"{'started':<19}  {'duration':>9}  {'status':<6} {'spans':>5}  {'operation':<22} operation id")
    for summary in summaries:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(summary.start_ns / 1e9))
        click.echo(
            f"{started:<19}  {summary.duration_seconds:>8.2f}s  {summary.status:<6} {summary.span_count:>5}  "
            f"{summary.name:<22} {summary.trace_id}"
        )


@trace.command("show")
@click.argument("operation_id")
@state_dir_option
@click.option("--json", "as_json", is_flag=True, help="Print the span tree as JSON.")
def show(operation_id: str, state_dir: Path | None, as_json: bool) -> None:
    """Show the span tree of OPERATION_ID (or `latest`) as a waterfall."""
    from sparkrun.cli.waterfall import render_waterfall, span_tree

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
        click.echo(render_waterfall(spans))


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
    import otel
    from otel.event_replay import read_events
    from sparkrun.cli.main import CliState

    events = list(read_events(events_file))
    if not events:
        raise UserError(f"no events to replay (path={events_file})")
    state = ctx.find_object(CliState)
    telemetry = otel.configure(
        state_dir=resolved_state_dir(state_dir),
        set_global=False,
        shutdown_timeout=state.otel_shutdown_timeout if state else 2.0,
        endpoint=endpoint,
        protocol=protocol,
    )
    operation_ids = otel.replay(events, tracer_provider=telemetry.tracer_provider, name=name)
    delivered = telemetry.shutdown()
    for operation_id in operation_ids:
        click.echo(f"replayed operation {operation_id} -> {telemetry.destination}")
    if not delivered:
        raise UserError(
            f"spans were not delivered in time (destination={telemetry.destination}, "
            f"timeout={telemetry.shutdown_timeout:g} s)"
        )
