"""A controller's timing records as timed child activities, with the contract's identity rules.

Each span becomes an activity (source ``coldsnap.<name>``) scoped by the
invocation that imported it, at its real start on its own clock and with its
own duration. Unit = the span's ``unit`` attribute, else its clock's unit;
worker likewise; host = the span's ``host`` attribute, else the unit's host in
the request. A span without a parent hangs off the current controller span
(``coldsnap.controller``). The preparation stages are also announced to the
launch phase tracker as steps, when they start.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sparkrun.feedback import FeedbackReporter
from sparkrun.foreign_spans import ForeignSpan, SpanImporter
from sparkrun.plugins.coldsnap.timing import Clock, Span, TimingRecord

__all__ = ["CONTROLLER_SPAN", "PREPARATION_STAGES", "ControllerSpans"]

CONTROLLER_SPAN = "coldsnap.controller"
#: In order, each needing the one before.
PREPARATION_STAGES = ("coldsnap.hardware", "coldsnap.artifact", "coldsnap.weights", "coldsnap.capsules")
_IDENTITY_ATTRIBUTES = frozenset({"unit", "worker", "host", "error"})


class ControllerSpans:
    """Imports one controller invocation's spans under ``reporter``; call it with each timing record."""

    def __init__(
        self,
        reporter: FeedbackReporter,
        request: Mapping[str, Any],
        *,
        on_stage: Callable[[int, str], None] | None = None,
    ) -> None:
        self._importer = SpanImporter(reporter, prefix="coldsnap")
        self._hosts = {unit["id"]: unit.get("host") for unit in request.get("launch", {}).get("units", [])}
        self._on_stage = on_stage
        self._clocks: dict[str, Clock] = {}
        self._controllers: list[str] = []  # open controller spans, innermost last
        self._done: set[str] = set()
        self._started: set[str] = set()

    def __call__(self, record: TimingRecord) -> None:
        if record.clock is not None:
            self._clocks[record.clock.id] = record.clock
        span = record.span
        if span is None:
            return
        if record.event == "span_start":
            self._start(span)
        elif record.event == "span_complete":
            self._complete(span)

    def add_clocks(self, clocks: Mapping[str, Clock]) -> None:
        """Clocks known from the receipt (for spans the stream never delivered)."""
        for clock_id, clock in clocks.items():
            self._clocks.setdefault(clock_id, clock)

    def complete_missing(self, spans: list[Span]) -> int:
        """Import the receipt's spans the stream did not complete (the receipt is authoritative); returns how many."""
        missing = [span for span in spans if span.id not in self._done]
        for span in missing:
            self._complete(span)
        return len(missing)

    def _start(self, span: Span) -> None:
        self._started.add(span.id)
        if span.name == CONTROLLER_SPAN:
            self._controllers.append(span.id)
        if span.name in PREPARATION_STAGES and self._on_stage is not None:
            self._on_stage(PREPARATION_STAGES.index(span.name) + 1, span.name)
        self._importer.started(self._foreign(span))

    def _complete(self, span: Span) -> None:
        if span.id not in self._started and span.name == CONTROLLER_SPAN:
            self._controllers.append(span.id)
        foreign = self._foreign(span)
        self._done.add(span.id)
        if span.id in self._controllers:
            self._controllers.remove(span.id)
        duration = span.duration_seconds if span.duration_seconds is not None else 0.0
        self._importer.finished(foreign.completed(duration, failed=span.status == "error", error=span.error))

    def _foreign(self, span: Span) -> ForeignSpan:
        clock = self._clocks[span.clock]
        attributes = span.attributes
        unit = attributes.get("unit") or clock.unit
        worker = attributes.get("worker") or clock.worker
        host = attributes.get("host") or (self._hosts.get(unit) if unit else None)
        parent = span.parent
        if parent is None and span.name != CONTROLLER_SPAN and self._controllers:
            parent = self._controllers[-1]
        return ForeignSpan(
            span.id,
            span.name,
            span.wall_start(clock),
            parent=parent,
            host=host,
            unit=unit,
            worker=worker,
            clock=clock.id,
            attributes={k: v for k, v in attributes.items() if k not in _IDENTITY_ATTRIBUTES},
        )
