"""Telemetry for CLI commands: start it for a session, say once if it was not delivered, replay-and-export.

A command's traces go to the OTLP endpoint of the environment, else to the
local trace store. A collector that is down costs one warning line naming
the endpoint (the SDK's own retry messages are silenced by the CLI's logging
setup), and shutdown at exit waits at most ``--otel-shutdown-timeout``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click

from sparkrun.cli.options import CliState, UserError
from sparkrun.core.events import Event

__all__ = ["RenderedFilter", "export_replay", "start_telemetry"]

_log = logging.getLogger("sparkrun.cli")


class RenderedFilter(logging.Filter):
    """Drops the log records of feedback reports that a session already draws on the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not hasattr(record, "sparkrun_event")


def _warn_undelivered(telemetry: Any) -> None:
    click.echo(f"warning: traces were not delivered to {telemetry.destination} ({telemetry.problem})", err=True)


def start_telemetry(ctx: click.Context, state: CliState, state_dir: Path) -> None:
    """Export this command's operations as traces (unless ``--no-otel``); stopped when the command ends."""
    if not state.otel:
        return
    from opentelemetry import trace

    from otel import SparkrunInstrumentor, configure

    instrumentor = SparkrunInstrumentor()
    preinstrumented = instrumentor.is_instrumented_by_opentelemetry  # by `opentelemetry-instrument`
    if preinstrumented and not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # an OpenTelemetry distro configured the SDK; it owns export and shutdown
    try:
        telemetry = configure(state_dir=state_dir, shutdown_timeout=state.otel_shutdown_timeout)
        if not preinstrumented:
            instrumentor.instrument(
                tracer_provider=telemetry.tracer_provider,
                meter_provider=telemetry.meter_provider,
                event_limit=telemetry.event_limit,
            )
    except Exception as error:  # telemetry never breaks the command it would observe
        _log.warning("telemetry is off for this command: %s", error)
        return

    def stop() -> None:
        if not preinstrumented:
            instrumentor.uninstrument()
        if not telemetry.shutdown():
            _warn_undelivered(telemetry)

    ctx.call_on_close(stop)


def export_replay(
    events: Iterable[Event],
    *,
    state: CliState | None,
    state_dir: Path,
    endpoint: str | None = None,
    protocol: str | None = None,
    **replay_options: Any,
) -> tuple[list[str], str]:
    """Rebuild the spans of recorded events and export them; returns the operation ids and the destination.

    Raises :class:`UserError` if the spans were not delivered in time.
    """
    import otel

    telemetry = otel.configure(
        state_dir=state_dir,
        set_global=False,
        shutdown_timeout=state.otel_shutdown_timeout if state else 2.0,
        endpoint=endpoint,
        protocol=protocol,
    )
    operation_ids = otel.replay(events, tracer_provider=telemetry.tracer_provider, **replay_options)
    if not telemetry.shutdown():
        raise UserError(f"spans were not delivered to {telemetry.destination} ({telemetry.problem})")
    return operation_ids, telemetry.destination
