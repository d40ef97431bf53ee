"""``sparkrun schema``: the JSON Schemas of the native event stream."""

from __future__ import annotations

import json

import click

from sparkrun.cli.options import Command

__all__ = ["schema"]


@click.command(cls=Command)
@click.argument(
    "event_type", type=click.Choice(["feedback", "log", "progress", "benchmark", "setup"]), default="feedback"
)
def schema(event_type: str) -> None:
    """Print the JSON Schema of an event type of the native stream."""
    from sparkrun.schemas import load_schema

    click.echo(json.dumps(load_schema(event_type), indent=2))
