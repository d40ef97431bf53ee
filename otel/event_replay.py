"""Rebuild spans from recorded native events (a journal or a JSON-lines file).

Span ids derive from (operation id, activity id) and the trace id is the
operation id, so replaying the same events twice exports identical ids. The
operation's start and end are the first and last event times; its outcome
is unknown to the events alone unless the caller supplies it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from opentelemetry import metrics, trace

from otel.span_mapper import SpanMapper
from sparkrun.core.operation import OperationInfo, Outcome

__all__ = ["read_events", "replay"]


def read_events(path: Path | str) -> Iterator[dict[str, Any]]:
    """Events of a JSON-lines file; a malformed line raises ``ValueError`` naming it."""
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}:{number} is not JSON ({error.msg}, column {error.colno})") from None
            if not isinstance(event, dict) or not isinstance(event.get("operation_id"), str):
                raise ValueError(f"{path}:{number} is not a sparkrun event (no operation_id)")
            if not isinstance(event.get("timestamp"), (int, float)):
                raise ValueError(f"{path}:{number} is not a sparkrun event (timestamp={event.get('timestamp')!r})")
            yield event


def replay(
    events: Iterable[dict[str, Any]],
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    name: str = "replay",
    outcome: Outcome | None = None,
    started_at: float | None = None,
    finished_at: float | None = None,
) -> list[str]:
    """Export the spans of every operation in ``events``; returns their operation ids.

    ``name`` becomes the root span name (``sparkrun.<name>``), since native
    events do not carry the operation's name. A caller that knows more (the
    daemon's job record) passes the outcome and the operation's start and end
    times; otherwise the first and last events bound the root span.
    """
    by_operation: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_operation.setdefault(event["operation_id"], []).append(event)
    mapper = SpanMapper(
        tracer_provider or trace.get_tracer_provider(),
        meter_provider if meter_provider is not None else metrics.get_meter_provider(),
    )
    for operation_id, recorded in by_operation.items():
        recorded.sort(key=lambda event: event["timestamp"])
        start = min(started_at, recorded[0]["timestamp"]) if started_at else recorded[0]["timestamp"]
        end = max(finished_at, recorded[-1]["timestamp"]) if finished_at else recorded[-1]["timestamp"]
        mapper.start(OperationInfo(operation_id, name, start))
        for event in recorded:
            mapper.handle(operation_id, event)
        mapper.finish(operation_id, outcome, None, end)
    return list(by_operation)
