"""``sparkrun daemon jobs``: inspect and control the daemon's jobs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sparkrun.cli.options import CliState, Group, UserError, resolved_state_dir, state_dir_option

if TYPE_CHECKING:
    from sparkrun.daemon.client import DaemonClient

__all__ = ["client_for", "job_line", "jobs"]


def client_for(state_dir: Path | None) -> DaemonClient:
    """The client of the daemon of this state directory."""
    from sparkrun.daemon.client import DaemonClient

    return DaemonClient.for_state(resolved_state_dir(state_dir))


def job_line(job: dict[str, Any]) -> str:
    """What a job is doing, for a status line while a command waits on it."""
    state = job["state"]
    since = job.get("started_at") or job["created_at"]
    return f"job {job['job_id'][:12]} {state.replace('_', ' ')} ({time.time() - since:.0f} s)"


@click.group(cls=Group)
def jobs() -> None:
    """Inspect and control daemon jobs."""


@jobs.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True, help="How many jobs.")
@state_dir_option
def list_jobs(as_json: bool, limit: int, state_dir: Path | None) -> None:
    """Recent jobs, newest first."""
    from sparkrun.cli.tables import render_table

    found = client_for(state_dir).jobs(limit=limit)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    if not found:
        click.echo("no jobs")
        return
    rows = [
        [
            job["job_id"],
            job["state"],
            job["operation"],
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job["created_at"])),
            str(job["last_seq"]),
            (job.get("error") or {}).get("message", ""),
        ]
        for job in found
    ]
    click.echo(render_table(["job", "state", "operation", "created", "events", "error"], rows, right=(4,)))


@jobs.command()
@click.argument("job_id")
@state_dir_option
def show(job_id: str, state_dir: Path | None) -> None:
    """One job as JSON."""
    click.echo(json.dumps(client_for(state_dir).job(job_id), indent=2))


@jobs.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the events as NDJSON.")
@click.option("--after", type=click.IntRange(min=0), help="Resume after this sequence number [oldest retained].")
@click.option("--no-follow", is_flag=True, help="Replay what is journaled and stop.")
@state_dir_option
@click.pass_context
def events(
    ctx: click.Context, job_id: str, as_json: bool, after: int | None, no_follow: bool, state_dir: Path | None
) -> None:
    """Stream a job's events (rendered like `sparkrun run`)."""
    from sparkrun.cli.live import LiveRenderer

    state = ctx.find_object(CliState) or CliState()
    client = client_for(state_dir)
    if as_json:
        for item in client.events(job_id, after=after, follow=not no_follow):
            click.echo(json.dumps({"seq": item.seq, "event": item.name, "data": item.data}))
        return
    render = LiveRenderer(quiet=state.quiet, verbose=state.verbose)
    job = client.job(job_id)
    if job["last_seq"] == 0 and job["state"] in ("queued", "running"):
        render.waiting(f"{job_line(job)}: no events yet")
    end = None
    try:
        for item in client.events(job_id, after=after, follow=not no_follow):
            if item.name == "message":
                render(item.journal_event())
            elif item.name == "gap":
                render.close()
                click.echo(f"(events up to {item.data['first_retained'] - 1} are no longer retained)", err=True)
            elif item.name == "end":
                end = item.data
    except KeyboardInterrupt:
        render.close(interrupted=True)
        raise
    error = (client.job(job_id).get("error") or {}).get("message") if end and end["state"] != "succeeded" else None
    render.close(error=error)  # the bars go before the last line is printed
    if end is not None:
        click.echo(f"job {job_id} {end['state']}" + (f": {error}" if error else ""))


@jobs.command()
@click.argument("job_id")
@state_dir_option
def cancel(job_id: str, state_dir: Path | None) -> None:
    """Cancel a job that has not finished (queued, running or waiting for an answer)."""
    job = client_for(state_dir).cancel(job_id)
    click.echo(f"job {job_id}: {job['state']}")


@jobs.command()
@click.argument("job_id")
@click.option("--export", is_flag=True, help="Re-export the trace from the journal (same ids, same times).")
@click.option("--endpoint", help="OTLP endpoint for --export (default: the environment's, else the local store).")
@state_dir_option
@click.pass_context
def trace(ctx: click.Context, job_id: str, export: bool, endpoint: str | None, state_dir: Path | None) -> None:
    """Show a job's trace (trace id = its operation id), or re-export it."""
    client = client_for(state_dir)
    job = client.job(job_id)
    state = resolved_state_dir(state_dir)
    if export:
        from sparkrun.cli.telemetry import export_replay
        from sparkrun.errors import ReportedError

        recorded = [
            item.journal_event() for item in client.events(job_id, after=None, follow=False) if item.name == "message"
        ]
        started = job.get("operation_started_at") or job.get("started_at")
        finished = job.get("operation_finished_at") or job.get("finished_at")
        if not recorded and (started is None or finished is None):
            raise UserError(f"the job never ran and the journal holds no events for it (job_id={job_id})")
        error = job.get("error") or {}
        _, destination = export_replay(
            recorded,
            state=ctx.find_object(CliState),
            state_dir=state,
            endpoint=endpoint,
            name=job["operation"],
            outcome=job["state"] if job["state"] in ("succeeded", "failed", "cancelled") else None,
            error=ReportedError(error["type"], error["message"]) if job["state"] == "failed" and error else None,
            started_at=started,
            finished_at=finished,
            operation_id=job["operation_id"],
        )
        click.echo(f"exported {len(recorded)} events of operation {job['operation_id']} -> {destination}")
        return
    from otel.local_store import TraceStore
    from sparkrun.cli.tables import terminal_width
    from sparkrun.cli.waterfall import render_waterfall

    spans = TraceStore.in_state_dir(state).spans(job["operation_id"])
    if not spans:
        raise UserError(f"no trace for this job in the local store (operation_id={job['operation_id']}); try --export")
    click.echo(f"trace {job['operation_id']} (job {job_id}, {job['state']})")
    click.echo(render_waterfall(spans, width=terminal_width()))
