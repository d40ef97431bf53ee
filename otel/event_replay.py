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
from typing import Any, cast

from opentelemetry import metrics, trace

from otel.span_mapper import SpanMapper
from sparkrun.core.events import Event
from sparkrun.core.operation import OperationInfo, Outcome

__all__ = ["read_events", "replay"]


def read_events(path: Path | str) -> Iterator[Event]:
    """Events of a JSON-lines file; a malformed line raises ``ValueError`` naming it.

    A file is untrusted, and this is where its events become typed. Checked: each line is a JSON
    object with a string ``operation_id`` and a numeric ``timestamp`` (what a replay groups and
    orders by). Nothing else is: the span mapper skips what it cannot map, and an unknown ``type``
    becomes an event of the root span like in a live trace.
    """
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
            yield cast(Event, event)


def replay(
    events: Iterable[Event],
    *,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    name: str = "replay",
    outcome: Outcome | None = None,
    error: BaseException | None = None,
    started_at: float | None = None,
    finished_at: float | None = None,
    operation_id: str | None = None,
) -> list[str]:
    """Export the spans of every operation in ``events``; returns their operation ids.

    ``name`` becomes the root span name (``sparkrun.<name>``), since native
    events do not carry the operation's name. A caller that knows more (the
    daemon's job record) passes the outcome, the error (a
    :class:`~sparkrun.errors.ReportedError` read back from a record) and the
    operation's own start and end times, so the replay has the times and
    status of the live trace; otherwise the first and last events bound the
    root span. ``operation_id`` names an operation to replay even if it has no
    events (its root span alone, which needs ``started_at`` and ``finished_at``).
    """
    by_operation: dict[str, list[Event]] = {operation_id: []} if operation_id else {}
    for event in events:
        by_operation.setdefault(event["operation_id"], []).append(event)
    mapper = SpanMapper(
        tracer_provider or trace.get_tracer_provider(),
        meter_provider if meter_provider is not None else metrics.get_meter_provider(),
    )
    for replayed, recorded in by_operation.items():
        recorded.sort(key=lambda event: event["timestamp"])
        times = [event["timestamp"] for event in recorded]
        start = min([started_at, *times[:1]]) if started_at is not None else times[0]
        end = max([finished_at, *times[-1:]]) if finished_at is not None else times[-1]
        mapper.start(OperationInfo(replayed, name, start))
        for event in recorded:
            mapper.handle(replayed, event)
        mapper.finish(replayed, outcome, error, end)
    return list(by_operation)
