"""The ``sparkrun`` command group, its global options and error rendering.

Only click is imported at module level so ``sparkrun --help`` stays fast;
each command imports what it needs when it runs.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from sparkrun import __version__
from sparkrun.errors import SparkrunError

__all__ = ["cli", "main"]


@dataclass
class CliState:
    """Global options, shared with subcommands through ``ctx.obj``."""

    debug: bool = False
    quiet: bool = False
    otel: bool = True
    otel_shutdown_timeout: float = 2.0

    def start_telemetry(self, ctx: click.Context, state_dir: Path) -> None:
        """Export this command's operations as traces (unless ``--no-otel``).

        The destination is the OTLP endpoint of the environment, else the
        local trace store; shutdown at exit waits at most the configured time.
        """
        if not self.otel:
            return
        from opentelemetry import trace

        from otel import SparkrunInstrumentor, configure

        instrumentor = SparkrunInstrumentor()
        preinstrumented = instrumentor.is_instrumented_by_opentelemetry  # by `opentelemetry-instrument`
        if preinstrumented and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            return  # an OpenTelemetry distro configured the SDK; it owns export and shutdown
        try:
            telemetry = configure(state_dir=state_dir, shutdown_timeout=self.otel_shutdown_timeout)
            if not preinstrumented:
                instrumentor.instrument(
                    tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
                )
        except Exception as error:  # telemetry never breaks the command it would observe
            logging.getLogger("sparkrun.cli").warning("telemetry is off for this command: %s", error)
            return

        def stop() -> None:
            if not preinstrumented:
                instrumentor.uninstrument()
            if not telemetry.shutdown():
                click.echo(
                    f"warning: telemetry for {telemetry.destination} was not delivered within "
                    f"{self.otel_shutdown_timeout:g} s",
                    err=True,
                )

        ctx.call_on_close(stop)


class UserError(click.ClickException):
    """A mistake the user can fix, rendered as one ``error:`` line (exit 1)."""

    def show(self, file=None) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"error: {self.format_message()}", err=True)


class _SparkrunGroup(click.Group):
    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except (SparkrunError, ValueError) as error:
            state = ctx.find_object(CliState)
            if state is not None and state.debug:
                raise
            raise UserError(str(error)) from error


class _NotRenderedFilter(logging.Filter):
    """Drops log records of feedback reports while a command prints the events themselves."""

    rendering = False

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.rendering and hasattr(record, "sparkrun_event"))


_not_rendered = _NotRenderedFilter()


def render_events_live() -> None:
    """Call when a command prints feedback events itself, so they are not logged twice."""
    _not_rendered.rendering = True


def _configure_logging(verbose: int, quiet: bool) -> None:
    from sparkrun.core.log_bridge import PROGRESS

    level = logging.WARNING if quiet else (PROGRESS, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_not_rendered)
    logging.basicConfig(level=level, handlers=[handler])


@click.group(cls=_SparkrunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sparkrun")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings, errors and results.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.option(
    "--otel/--no-otel",
    default=True,
    envvar="SPARKRUN_OTEL",
    show_default=True,
    help="Export operations as OpenTelemetry traces: to the OTLP endpoint of OTEL_EXPORTER_OTLP_ENDPOINT, "
    "else to the local trace store.",
)
@click.option(
    "--otel-shutdown-timeout",
    type=click.FloatRange(min=0),
    default=2.0,
    envvar="SPARKRUN_OTEL_SHUTDOWN_TIMEOUT",
    show_default=True,
    help="Seconds to wait at exit for telemetry to be delivered.",
)
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool, debug: bool, otel: bool, otel_shutdown_timeout: float) -> None:
    """Launch and manage inference workloads, with structured feedback."""
    ctx.obj = CliState(debug=debug, quiet=quiet, otel=otel, otel_shutdown_timeout=otel_shutdown_timeout)
    _configure_logging(verbose, quiet)


@cli.command()
@click.argument("event_type", type=click.Choice(["feedback", "log", "progress"]), default="feedback")
def schema(event_type: str) -> None:
    """Print the JSON Schema of an event type of the native stream."""
    from sparkrun.schemas import load_schema

    click.echo(json.dumps(load_schema(event_type), indent=2))


def state_dir_option(command):  # type: ignore[no-untyped-def]
    """The ``--state-dir`` option every state-touching command takes."""
    return click.option(
        "--state-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="SPARKRUN_STATE_DIR",
        help="State directory (default: $XDG_STATE_HOME/sparkrun).",
    )(command)


def resolved_state_dir(state_dir: Path | None) -> Path:
    """The state directory a command works in: ``--state-dir``, else the configured or default one."""
    from sparkrun.config import load_config

    return load_config(state_dir=state_dir).state_dir


def _register_subcommands() -> None:
    from sparkrun.cli.daemon import daemon
    from sparkrun.cli.doctor import doctor
    from sparkrun.cli.trace import trace
    from sparkrun.cli.workloads import logs, run, status, stop

    for command in (run, stop, status, logs, doctor, trace, daemon):
        cli.add_command(command)


_register_subcommands()


def main() -> None:
    """Console-script entry point."""
    try:
        cli(prog_name="sparkrun")
    except BrokenPipeError:
        # The reader of our output left (`sparkrun ... | head`): exit quietly, as Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(141)
