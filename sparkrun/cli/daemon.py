"""``sparkrun daemon``: run the daemon and talk to it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import click

from sparkrun.cli.main import UserError, resolved_state_dir, state_dir_option

__all__ = ["daemon"]

_EXIT_BY_STATE = {"succeeded": 0, "failed": 1, "cancelled": 3, "lost": 3}


def _client(state_dir: Path | None):  # type: ignore[no-untyped-def]
    from sparkrun.daemon.client import DaemonClient

    return DaemonClient.for_state(resolved_state_dir(state_dir))


#: The daemon's limits: (option, type, help). Each is also the config key ``daemon.<name>``.
_LIMITS = (
    ("max_events", click.IntRange(1, 10**9), "Events kept per job."),
    ("max_event_bytes", click.IntRange(1024, 2**40), "Bytes of events kept per job."),
    ("max_workers", click.IntRange(1, 64), "Jobs running at once."),
    ("max_streams", click.IntRange(1, 10_000), "Event and log streams open at once."),
    ("max_connections", click.IntRange(8, 100_000), "Open connections; more are closed at once."),
    ("header_timeout", click.FloatRange(0.1, 600), "Seconds a client has to send a request's headers."),
    ("body_timeout", click.FloatRange(0.1, 600), "Seconds a client has to send a request's body."),
    ("keepalive_seconds", click.FloatRange(0.1, 3600), "Seconds between SSE keepalive comments."),
)
_FLAGS = {"keepalive_seconds": "--keepalive"}


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def _serve_options(function):  # type: ignore[no-untyped-def]
    limits = [
        click.option(_flag(name), name, type=kind, help=f"{text} [config daemon.{name}]")
        for name, kind, text in _LIMITS
    ]
    for option in reversed(
        [
            click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on."),
            click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="0 picks one."),
            click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --host (warns)."),
            *limits,
            click.option("--no-metrics", is_flag=True, help="Do not serve GET /metrics (Prometheus)."),
            state_dir_option,
        ]
    ):
        function = option(function)
    return function


def _options(state_dir: Path | None, **given: Any):  # type: ignore[no-untyped-def]
    from sparkrun.config import load_config
    from sparkrun.daemon.server import ServeOptions

    config = load_config(state_dir=state_dir)
    section = config.get("daemon") or {}
    if not isinstance(section, dict):
        raise UserError(f"the daemon section of the configuration must be a mapping (path={config.path})")
    chosen = {}
    for name, kind, _ in _LIMITS:
        if given.get(name) is not None:
            chosen[name] = given[name]
        elif section.get(name) is not None:
            try:
                chosen[name] = kind.convert(section[name], None, None)
            except click.BadParameter as error:
                raise UserError(f"daemon.{name} in the configuration: {error.message} (path={config.path})") from None
    return ServeOptions(
        state_dir=config.state_dir,
        host=given["host"],
        port=given["port"],
        allow_remote=given["allow_remote"],
        plugins=tuple(section.get("plugins") or ()),
        metrics=not given.get("no_metrics"),
        **chosen,
    )


@click.group()
def daemon() -> None:
    """Run the sparkrun daemon and submit jobs to it."""


@daemon.command()
@_serve_options
def serve(state_dir: Path | None, **given: Any) -> None:
    """Run the daemon in the foreground."""
    from sparkrun.daemon.server import serve as run_server

    def listening(url: str) -> None:
        click.echo(f"sparkrun daemon listening on {url} (pid {os.getpid()})")

    run_server(_options(state_dir, **given), on_listening=listening)


@daemon.command()
@_serve_options
@click.option("--timeout", type=click.FloatRange(1, 300), default=60, show_default=True, help="Seconds to wait for it.")
def start(state_dir: Path | None, timeout: float, **given: Any) -> None:
    """Start the daemon in the background and wait until it answers."""
    from sparkrun.daemon import control
    from sparkrun.daemon.server import DaemonPaths

    options = _options(state_dir, **given)
    argv = ["--host", options.host, "--port", str(options.port)]
    for name, _, _ in _LIMITS:
        if given.get(name) is not None:
            argv += [_flag(name), str(given[name])]
    if options.allow_remote:
        argv.append("--allow-remote")
    if not options.metrics:
        argv.append("--no-metrics")
    info, stale = control.start(DaemonPaths(options.state_dir), argv, timeout=timeout)
    if stale:
        click.echo("removed the record of a daemon that is no longer running", err=True)
    click.echo(f"daemon started at {info.url} (pid {info.pid})")


@daemon.command()
@state_dir_option
def stop(state_dir: Path | None) -> None:
    """Stop the background daemon (its running jobs end as cancelled); fine if none runs."""
    from sparkrun.daemon import control
    from sparkrun.daemon.server import DaemonPaths

    click.echo(control.stop(DaemonPaths(resolved_state_dir(state_dir))))


@daemon.command()
@state_dir_option
def status(state_dir: Path | None) -> None:
    """Whether the daemon runs, and its jobs by state."""
    client = _client(state_dir)
    counts = client.counts()
    summary = ", ".join(f"{state} {count}" for state, count in sorted(counts.items())) or "no jobs"
    click.echo(f"daemon at {client.url}: {summary}")


def _parse_args(values: tuple[str, ...]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--arg")
        try:
            arguments[key] = json.loads(raw)  # numbers, booleans, objects; anything else is a string
        except json.JSONDecodeError:
            arguments[key] = raw
    return arguments


def _answer_prompts(client: Any, job_id: str) -> None:
    for prompt in client.prompts(job_id):
        kind, question = prompt["kind"], prompt["question"]
        if kind == "confirm":
            value: Any = click.confirm(question)
        elif kind == "choice":
            value = click.prompt(question, type=click.Choice(prompt["choices"]))
        else:
            value = click.prompt(question, hide_input=True)
        client.answer(job_id, prompt["prompt_id"], value)


@daemon.command()
@click.argument("operation")
@click.option("--arg", "args", multiple=True, metavar="KEY=VALUE", help="Argument (JSON value or text; repeatable).")
@click.option("--wait", is_flag=True, help="Wait for the result, answering prompts here.")
@click.option("--json", "as_json", is_flag=True, help="Print the job as JSON.")
@state_dir_option
@click.pass_context
def call(
    ctx: click.Context, operation: str, args: tuple[str, ...], wait: bool, as_json: bool, state_dir: Path | None
) -> None:
    """Submit OPERATION as a job; exit status follows the job with --wait."""
    client = _client(state_dir)
    submitted = client.submit(operation, _parse_args(args))
    job_id = submitted["job_id"]
    if not wait:
        click.echo(json.dumps(submitted) if as_json else f"job {job_id} queued (operation {submitted['operation_id']})")
        return
    while True:
        job = client.job(job_id)
        if job["state"] == "waiting_input":
            _answer_prompts(client, job_id)
        elif job["state"] in _EXIT_BY_STATE:
            break
        time.sleep(0.2)
    if as_json:
        click.echo(json.dumps(job))
    elif job["state"] == "succeeded":
        click.echo(json.dumps(job["result"], indent=2))
    else:
        click.echo(f"job {job_id} {job['state']}: {(job.get('error') or {}).get('message', '')}", err=True)
    ctx.exit(_EXIT_BY_STATE[job["state"]])


@daemon.group()
def jobs() -> None:
    """Inspect and control daemon jobs."""


@jobs.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True)
@state_dir_option
def list_jobs(as_json: bool, limit: int, state_dir: Path | None) -> None:
    """Recent jobs, newest first."""
    found = _client(state_dir).jobs(limit=limit)
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for job in found:
        created = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(job["created_at"]))
        click.echo(f"{job['job_id']}  {job['state']:<13} {job['operation']:<10} {created}  events {job['last_seq']}")


@jobs.command()
@click.argument("job_id")
@state_dir_option
def show(job_id: str, state_dir: Path | None) -> None:
    """One job as JSON."""
    click.echo(json.dumps(_client(state_dir).job(job_id), indent=2))


@jobs.command()
@click.argument("job_id")
@click.option("--json", "as_json", is_flag=True, help="Print the events as NDJSON.")
@click.option("--after", type=click.IntRange(min=0), help="Resume after this sequence number [oldest retained].")
@click.option("--no-follow", is_flag=True, help="Replay what is journaled and stop.")
@state_dir_option
def events(job_id: str, as_json: bool, after: int | None, no_follow: bool, state_dir: Path | None) -> None:
    """Stream a job's events (rendered like `sparkrun run`)."""
    from sparkrun.cli.live import LiveRenderer

    client = _client(state_dir)
    with LiveRenderer() as render:
        for item in client.events(job_id, after=after, follow=not no_follow):
            if as_json:
                click.echo(json.dumps({"seq": item.seq, "event": item.name, **({"data": item.data})}))
            elif item.name == "message":
                render(item.data)
            elif item.name == "gap":
                click.echo(f"(events up to {item.data['first_retained'] - 1} are no longer retained)", err=True)
            elif item.name == "end":
                click.echo(f"job {job_id} {item.data['state']}")


@jobs.command()
@click.argument("job_id")
@state_dir_option
def cancel(job_id: str, state_dir: Path | None) -> None:
    """Cancel a queued or running job."""
    job = _client(state_dir).cancel(job_id)
    click.echo(f"job {job_id}: cancel requested (state {job['state']})")


@jobs.command()
@click.argument("job_id")
@click.option("--export", is_flag=True, help="Re-export the trace from the journal (same ids).")
@click.option("--endpoint", help="OTLP endpoint for --export (default: the environment's, else the local store).")
@state_dir_option
def trace(job_id: str, export: bool, endpoint: str | None, state_dir: Path | None) -> None:
    """Show a job's trace (trace id = its operation id), or re-export it."""
    client = _client(state_dir)
    job = client.job(job_id)
    state = resolved_state_dir(state_dir)
    if export:
        import otel

        recorded = [item.data for item in client.events(job_id, after=None, follow=False) if item.name == "message"]
        if not recorded:
            raise UserError(f"the journal holds no events for this job (job_id={job_id})")
        telemetry = otel.configure(state_dir=state, set_global=False, endpoint=endpoint)
        otel.replay(
            recorded,
            tracer_provider=telemetry.tracer_provider,
            name=job["operation"],
            outcome=job["state"] if job["state"] in ("succeeded", "failed", "cancelled") else None,
            started_at=job.get("started_at"),
            finished_at=job.get("finished_at"),
        )
        delivered = telemetry.shutdown()
        click.echo(f"exported {len(recorded)} events of operation {job['operation_id']} -> {telemetry.destination}")
        if not delivered:
            raise UserError(f"spans were not delivered in time (destination={telemetry.destination})")
        return
    from otel.local_store import TraceStore
    from sparkrun.cli.waterfall import render_waterfall

    spans = TraceStore.in_state_dir(state).spans(job["operation_id"])
    if not spans:
        raise UserError(f"no trace for this job in the local store (operation_id={job['operation_id']}); try --export")
    click.echo(f"trace {job['operation_id']} (job {job_id}, {job['state']})")
    click.echo(render_waterfall(spans))
