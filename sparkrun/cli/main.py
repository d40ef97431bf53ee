"""The ``sparkrun`` command group, its global options and error rendering.

Only click is imported at module level so ``sparkrun --help`` stays fast;
each command imports what it needs when it runs.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass

import click

from sparkrun import __version__
from sparkrun.errors import SparkrunError

__all__ = ["cli", "main"]


@dataclass
class CliState:
    """Global options, shared with subcommands through ``ctx.obj``."""

    debug: bool = False


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


def _configure_logging(verbose: int, quiet: bool) -> None:
    from sparkrun.core.log_bridge import PROGRESS

    level = logging.WARNING if quiet else (PROGRESS, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


@click.group(cls=_SparkrunGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="sparkrun")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only warnings and errors.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, verbose: int, quiet: bool, debug: bool) -> None:
    """Launch and manage inference workloads, with structured feedback."""
    ctx.obj = CliState(debug=debug)
    _configure_logging(verbose, quiet)


@cli.command()
@click.argument("event_type", type=click.Choice(["feedback", "log"]), default="feedback")
def schema(event_type: str) -> None:
    """Print the JSON Schema of an event type of the native stream."""
    from sparkrun.schemas import load_schema

    click.echo(json.dumps(load_schema(event_type), indent=2))


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="sparkrun")
