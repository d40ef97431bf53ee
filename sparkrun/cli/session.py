"""What every operation command sets up: subscribers, recording, telemetry."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import click

from sparkrun.core.context import SparkrunContext

__all__ = ["events_jsonl_option", "operation_session"]


def events_jsonl_option(command):  # type: ignore[no-untyped-def]
    """``--events-jsonl PATH``: record the operation's native events (for replay or audit)."""
    return click.option(
        "--events-jsonl",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Append every native event of the operation to this JSON-lines file.",
    )(command)


@contextmanager
def operation_session(
    ctx: click.Context,
    *,
    state_dir: Path | None,
    as_json: bool = False,
    events_jsonl: Path | None = None,
    live: bool = True,
    traced: bool = True,
) -> Iterator[SparkrunContext]:
    """A context whose events are drawn live (or printed as JSON) and optionally recorded.

    Read-only commands pass ``live=False`` (they print their own output) and
    ``traced=False``, so the trace store keeps to operations that did work.
    """
    from sparkrun.application import initialize
    from sparkrun.cli.live import EventRecorder, LiveRenderer, fan_out
    from sparkrun.cli.main import CliState, render_events_live

    with ExitStack() as stack:
        state = ctx.find_object(CliState)
        quiet = state is not None and state.quiet
        renderer = None
        if as_json:
            renderer = EventRecorder(sys.stdout)
        elif live:
            renderer = stack.enter_context(LiveRenderer(quiet=quiet))
        recorder = None
        if events_jsonl is not None:
            recorder = EventRecorder(events_jsonl)
            stack.callback(recorder.close)
        sctx = initialize(state_dir=state_dir, events=fan_out(renderer, recorder))
        render_events_live()
        if state is not None and traced:
            state.start_telemetry(ctx, sctx.config.state_dir)
        yield sctx
