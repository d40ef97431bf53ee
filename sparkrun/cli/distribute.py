"""``sparkrun distribute image|model|list``: copy images and models to hosts, and see what hosts hold."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click

from sparkrun.cli.options import Group, Interrupted, operation_options, state_dir_option
from sparkrun.cli.session import operation_session

__all__ = ["distribute"]


@click.group(cls=Group)
def distribute() -> None:
    """Copy images and models to hosts, sending only what each host lacks.

    Each host is verified by hashing everything it received and reused;
    only that decides its outcome (see docs/distribution.md).
    """


def _summary(result: Any) -> str:
    lines = []
    for host, outcome in result.hosts.items():
        metrics = outcome.metrics
        figures = (
            f"{metrics.get('wire_bytes', 0)} bytes sent, {metrics.get('reused_bytes', 0)} reused, "
            f"{metrics.get('duration_seconds', 0)} s"
        )
        where = "; ".join(outcome.present) or outcome.error or ""
        lines.append(f"{host}: {outcome.outcome} ({figures}) {where}".rstrip())
    return "\n".join(lines)


def _copy(kind: str) -> click.Command:
    @click.argument("source")
    @click.option("--host", "hosts", multiple=True, required=True, metavar="HOST", help="A target host (repeatable).")
    @click.option("--force", is_flag=True, help="Send everything again, even what a host already has.")
    @click.option(
        "--platform",
        metavar="OS/ARCH",
        help="For a multi-platform image: the platform to copy (default linux/amd64).",
        hidden=kind != "image",
    )
    @operation_options
    @click.pass_context
    def command(
        ctx: click.Context,
        source: str,
        hosts: tuple[str, ...],
        force: bool,
        platform: str | None,
        as_json: bool,
        events_jsonl: Path | None,
        state_dir: Path | None,
    ) -> None:
        from sparkrun import api
        from sparkrun.errors import DistributionError

        try:
            with operation_session(ctx, state_dir=state_dir, as_json=as_json, events_jsonl=events_jsonl) as sctx:
                try:
                    result = api.distribute(
                        kind,  # type: ignore[arg-type]
                        source,
                        hosts,
                        force=force,
                        platform=platform,
                        sctx=sctx,
                    )
                except DistributionError as error:
                    if error.result is not None and not as_json:
                        click.echo(_summary(error.result))
                    raise
        except KeyboardInterrupt:
            raise Interrupted("interrupted; verified blobs stay on the hosts, a new run sends the rest") from None
        if as_json:
            click.echo(json.dumps({"type": "result", **asdict(result)}))
        else:
            click.echo(_summary(result))

    command.__doc__ = {
        "image": "Copy the image SOURCE (oci:PATH[:TAG], an OCI image layout) to each --host's image store.",
        "model": "Copy the model directory SOURCE to each --host's model cache.",
    }[kind]
    return distribute.command(kind)(command)


_copy("image")
_copy("model")


@distribute.command("list")
@click.option("--host", required=True, metavar="HOST", help="The host to ask.")
@click.option("--json", "as_json", is_flag=True, help="Print what the host holds as JSON.")
@state_dir_option
@click.pass_context
def list_(ctx: click.Context, host: str, as_json: bool, state_dir: Path | None) -> None:
    """Show the images and models HOST holds."""
    from sparkrun import api

    with operation_session(ctx, state_dir=state_dir, live=False, traced=False) as sctx:
        held = api.distribution_list(host, sctx=sctx)
    if as_json:
        click.echo(json.dumps(held, indent=2))
        return
    click.echo(f"{host}: {len(held['images'])} image(s), {len(held['models'])} model(s)")
    for image in held["images"]:
        click.echo(f"  image {image['tag']}  {image['digest']}  {image['size']} bytes (manifest)")
    for model in held["models"]:
        click.echo(f"  model {model['name']}  {model['files']} files, {model['size']} bytes  {model['path']}")
