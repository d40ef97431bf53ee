"""What every operation command sets up: subscribers, recording, telemetry."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import click

from sparkrun.cli.options import CliState
from sparkrun.core.context import SparkrunContext
from sparkrun.core.operation import Subscriber

__all__ = ["operation_session"]


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
    The log records of feedback reports are not logged during a session: the
    command either draws the events or prints its own result.
    """
    from sparkrun.application import initialize
    from sparkrun.cli.live import EventRecorder, LiveRenderer, fan_out
    from sparkrun.cli.telemetry import RenderedFilter, start_telemetry

    state = ctx.find_object(CliState) or CliState()
    with ExitStack() as stack:
        renderer: Subscriber | None = None
        if as_json:
            renderer = EventRecorder(sys.stdout)
        elif live:
            renderer = stack.enter_context(LiveRenderer(quiet=state.quiet, verbose=state.verbose))
        if state.handler is not None:  # the command draws the events or prints its own result: never both
            rendered = RenderedFilter()
            state.handler.addFilter(rendered)
            stack.callback(state.handler.removeFilter, rendered)
        recorder = None
        if events_jsonl is not None:
            recorder = EventRecorder(events_jsonl)
            stack.callback(recorder.close)
        sctx = initialize(state_dir=state_dir or state.state_dir, events=fan_out(renderer, recorder))
        if traced:
            start_telemetry(ctx, state, sctx.config.state_dir)
        yield sctx
