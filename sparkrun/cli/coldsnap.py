"""``sparkrun coldsnap capture|restore|sleep|wake|status TARGET``: drive a ColdSnap controller."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from sparkrun.cli.options import Group, Interrupted, operation_options
from sparkrun.cli.session import operation_session

__all__ = ["coldsnap"]

_HELP = {
    "capture": "Start TARGET, warm it and snapshot it to its artifact.",
    "restore": "Restore TARGET from its snapshot: prepare, evict what runs, restore.",
    "sleep": "Put TARGET's restored workload to sleep.",
    "wake": "Wake TARGET's sleeping workload.",
    "status": "Ask the controller what TARGET's workload is doing.",
}


@click.group(cls=Group)
def coldsnap() -> None:
    """Snapshot and restore workloads through a ColdSnap controller.

    TARGET is a recipe (name or path) or a running deployment. The
    controller comes from --controller, else the recipe's coldsnap section,
    else coldsnap.controller in the configuration file.
    """


def _line(result: Any) -> str:
    text = f"coldsnap {result.operation} of {result.workload}: {result.state}"
    if result.startup:
        parts = [f"{key}={value:.3f}" for key, value in result.startup.items()]
        text += f" ({', '.join(parts)})"
    text += f"; {result.spans} controller spans; operation {result.operation_id}"
    if result.warnings:
        text += f"; {len(result.warnings)} warning(s) above"
    return text


def _command(name: str) -> click.Command:
    @click.argument("target")
    @click.option("--controller", metavar="CMD", help="Controller command line (overrides the recipe and config).")
    @click.option("--snapshot-driver", metavar="ID", help="Snapshot driver id, such as n580 (overrides the recipe).")
    @operation_options
    @click.pass_context
    def command(
        ctx: click.Context,
        target: str,
        controller: str | None,
        snapshot_driver: str | None,
        as_json: bool,
        events_jsonl: Path | None,
        state_dir: Path | None,
    ) -> None:
        from sparkrun import api

        options = api.ColdSnapOptions(name, target, controller=controller, snapshot_driver=snapshot_driver)
        try:
            with operation_session(ctx, state_dir=state_dir, as_json=as_json, events_jsonl=events_jsonl) as sctx:
                result = api.coldsnap(options, sctx=sctx)
        except KeyboardInterrupt:
            raise Interrupted(f"interrupted; the controller's {name} was cancelled (see the lines above)") from None
        if as_json:
            click.echo(json.dumps({"type": "result", **asdict(result)}))
        else:
            click.echo(_line(result))

    command.__doc__ = _HELP[name]
    return coldsnap.command(name)(command)


for _name in _HELP:
    _command(_name)
