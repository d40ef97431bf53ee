"""``sparkrun daemon``: run the daemon and talk to it."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from sparkrun.cli.daemon_jobs import client_for, job_line, jobs
from sparkrun.cli.options import Group, UserError, resolved_state_dir, state_dir_option

if TYPE_CHECKING:
    from sparkrun.daemon.client import DaemonClient
    from sparkrun.daemon.server import ServeOptions

__all__ = ["daemon"]

_EXIT_BY_STATE = {"succeeded": 0, "failed": 1, "cancelled": 3, "lost": 3}
#: ``daemon status`` exit codes, as init scripts report a service: 0 running, 3 not running.
_NOT_RUNNING = 3


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
_Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _flag(name: str) -> str:
    return _FLAGS.get(name, "--" + name.replace("_", "-"))


def _serve_options(function: Callable[..., Any]) -> Callable[..., Any]:
    limits: list[_Decorator] = [
        click.option(_flag(name), name, type=kind, help=f"{text} [config daemon.{name}]")
        for name, kind, text in _LIMITS
    ]
    options: list[_Decorator] = [
        click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on."),
        click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="0 picks one."),
        click.option("--allow-remote", is_flag=True, help="Allow a non-loopback --host (warns)."),
        *limits,
        click.option("--no-metrics", is_flag=True, help="Do not serve GET /metrics (Prometheus)."),
        state_dir_option,
    ]
    for option in reversed(options):
        function = option(function)
    return function


def _options(state_dir: Path | None, **given: Any) -> ServeOptions:
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
        trace_links=_trace_links(config.get("console") or {}, config.path),
        **chosen,
    )


def _trace_links(section: Any, path: Path | None) -> tuple[tuple[str, str], ...]:
    """``console.jaeger_url`` and ``console.tempo_url`` of the configuration, checked."""
    if not isinstance(section, dict):
        raise UserError(f"the console section of the configuration must be a mapping (path={path})")
    links = []
    for name, key in (("Jaeger", "jaeger_url"), ("Tempo", "tempo_url")):
        url = section.get(key)
        if url is None:
            continue
        if not isinstance(url, str) or not url.startswith(("http://", "https://")) or len(url) > 2000:
            raise UserError(f"console.{key} is {str(url)[:80]!r}; it must be an http(s) URL (path={path})")
        links.append((name, url))
    return tuple(links)


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
    from sparkrun.daemon.files import DaemonPaths

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
    click.echo(f"daemon started at {info.url} (pid {info.pid}); console: {info.url}/ui/")


@daemon.command()
@state_dir_option
def stop(state_dir: Path | None) -> None:
    """Stop the background daemon (its running jobs end as cancelled); fine if none runs."""
    from sparkrun.daemon import control
    from sparkrun.daemon.files import DaemonPaths

    click.echo(control.stop(DaemonPaths(resolved_state_dir(state_dir))))


@daemon.command()
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@state_dir_option
@click.pass_context
def status(ctx: click.Context, as_json: bool, state_dir: Path | None) -> None:
    """Whether the daemon runs, and its jobs by state. Exits 0 when it runs, 3 when it does not."""
    from sparkrun.daemon.client import DaemonClient
    from sparkrun.daemon.files import DaemonPaths, lock_held, read_info

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


def _answer_prompts(client: DaemonClient, job_id: str) -> None:
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
    """Submit OPERATION as a job; exit status follows the job with --wait (0 succeeded, 1 failed, 3 cancelled)."""
    client = client_for(state_dir)
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


def _wait_for(client: DaemonClient, job_id: str, *, on_terminal: bool) -> dict[str, Any]:
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
        with console.status(job_line(job)) as line:
            while job["state"] not in (*_EXIT_BY_STATE, "waiting_input"):
                time.sleep(0.2)
                job = client.job(job_id)
                line.update(job_line(job))


daemon.add_command(jobs)
