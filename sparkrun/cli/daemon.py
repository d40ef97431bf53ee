"""``sparkrun daemon``: run the daemon and talk to it."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from sparkrun.cli.options import CliState, Group, UserError, resolved_state_dir, state_dir_option

__all__ = ["daemon"]

_EXIT_BY_STATE = {"succeeded": 0, "failed": 1, "cancelled": 3, "lost": 3}
#: ``daemon status`` exit codes, as init scripts report a service: 0 running, 3 not running.
_NOT_RUNNING = 3


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


@click.group(cls=Group)
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
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@state_dir_option
@click.pass_context
def status(ctx: click.Context, as_json: bool, state_dir: Path | None) -> None:
    """Whether the daemon runs, and its jobs by state. Exits 0 when it runs, 3 when it does not."""
    from sparkrun.daemon.client import DaemonClient
    from sparkrun.daemon.server import DaemonPaths, lock_held, read_info

    paths = DaemonPaths(resolved_state_dir(state_dir))
    info = read_info(paths)
    if info is None or not lock_held(paths):
        click.echo(
            json.dumps({"running": False}) if as_json else f"the daemon is not running (state_dir={paths.state_dir})"
        )
        ctx.exit(_NOT_RUNNING)
    counts = DaemonClient.for_state(paths.state_dir).counts()
    if as_json:
        click.echo(json.dumps({"running": True, "url": info.url, "pid": info.pid, "jobs": counts}))
        return
    summary = ", ".join(f"{state} {count}" for state, count in sorted(counts.items())) or "no jobs"
    click.echo(f"daemon at {info.url} (pid {info.pid}): {summary}")


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


def _job_line(job: dict[str, Any]) -> str:
    """What a job is doing, for a status line while a command waits on it."""
    state = job["state"]
    since = job.get("started_at") or job["created_at"]
    return f"job {job['job_id'][:12]} {state.replace('_', ' ')} ({time.time() - since:.0f} s)"


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
    """Submit OPERATION as a job; exit status follows the job with --wait (0 succeeded, 1 failed, 3 cancelled)."""
    client = _client(state_dir)
    submitted = client.submit(operation, _parse_args(args))
    job_id = submitted["job_id"]
    if not wait:
        click.echo(json.dumps(submitted) if as_json else f"job {job_id} queued (operation {submitted['operation_id']})")
        return
    job = _wait_for(client, job_id, on_terminal=sys.stderr.isatty())
    if as_json:
        click.echo(json.dumps(job))
    elif job["state"] == "succeeded":
        click.echo(json.dumps(job["result"], indent=2))
    else:
        click.echo(f"job {job_id} {job['state']}: {(job.get('error') or {}).get('message', '')}", err=True)
    ctx.exit(_EXIT_BY_STATE[job["state"]])


def _wait_for(client: Any, job_id: str, *, on_terminal: bool) -> dict[str, Any]:
    """Poll the job until it ends, answering its prompts here; a status line on a terminal meanwhile."""
    from rich.console import Console

    console = Console(stderr=True) if on_terminal else None
    while True:
        job = client.job(job_id)
        if job["state"] == "waiting_input":
            _answer_prompts(client, job_id)
            continue
        if job["state"] in _EXIT_BY_STATE:
            return job
        if console is None:
            time.sleep(0.2)
            continue
        with console.status(_job_line(job)) as line:
            while job["state"] not in (*_EXIT_BY_STATE, "waiting_input"):
                time.sleep(0.2)
                job = client.job(job_id)
                line.update(_job_line(job))


@daemon.group()
def jobs() -> None:
    """Inspect and control daemon jobs."""


@jobs.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the jobs as JSON.")
@click.option("--limit", type=click.IntRange(1, 10_000), default=20, show_default=True, help="How many jobs.")
@state_dir_option
def list_jobs(as_json: bool, limit: int, state_dir: Path | None) -> None:
    """Recent jobs, newest first."""
    from sparkrun.cli.tables import render_table

    found = _client(state_dir).jobs(limit=limit)
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
    click.echo(json.dumps(_client(state_dir).job(job_id), indent=2))


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
    client = _client(state_dir)
    if as_json:
        for item in client.events(job_id, after=after, follow=not no_follow):
            click.echo(json.dumps({"seq": item.seq, "event": item.name, "data": item.data}))
        return
    render = LiveRenderer(quiet=state.quiet, verbose=state.verbose)
    job = client.job(job_id)
    if job["last_seq"] == 0 and job["state"] in ("queued", "running"):
        render.waiting(f"{_job_line(job)}: no events yet")
    end = None
    try:
        for item in client.events(job_id, after=after, follow=not no_follow):
            if item.name == "message":
                render(item.data)
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
    job = _client(state_dir).cancel(job_id)
    click.echo(f"job {job_id}: {job['state']}")


@jobs.command()
@click.argument("job_id")
@click.option("--export", is_flag=True, help="Re-export the trace from the journal (same ids, same times).")
@click.option("--endpoint", help="OTLP endpoint for --export (default: the environment's, else the local store).")
@state_dir_option
@click.pass_context
def trace(ctx: click.Context, job_id: str, export: bool, endpoint: str | None, state_dir: Path | None) -> None:
    """Show a job's trace (trace id = its operation id), or re-export it."""
    client = _client(state_dir)
    job = client.job(job_id)
    state = resolved_state_dir(state_dir)
    if export:
        from sparkrun.cli.telemetry import export_replay
        from sparkrun.errors import ReportedError

        recorded = [item.data for item in client.events(job_id, after=None, follow=False) if item.name == "message"]
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
