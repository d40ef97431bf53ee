"""Spans measured elsewhere, imported as timed activities of an operation.

A controller that times its own work (a ColdSnap controller on its clocks, a
benchmark framework's attempts) hands sparkrun spans with their own ids,
parents, start times and durations. :class:`SpanImporter` turns each into a
child activity of the importing reporter, so it reaches every subscriber,
the journal and the trace like any other report:

- the activity id is scoped, ``<importing activity>/<foreign id>``, so two
  controllers of one operation never collide;
- a foreign parent maps to its imported activity; a span without one hangs
  off the importing reporter;
- its reports carry the metrics ``started_at`` (Unix seconds) and, on the
  terminal report, ``duration_seconds``: the span mapper starts and ends the
  span at those real times, whatever the reports' own timestamps, and never
  adds durations measured on different clocks;
- ``host`` is the report's host; ``unit``, ``worker`` and ``clock`` and the
  span's own attributes become metrics.

Short spans that did not fail are reported at ``info`` level (a terminal
shows them with ``-v``); the journal and the trace have every one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from math import isfinite
from typing import Any

from sparkrun.core.envelope import MAX_METRIC_KEY_CHARS, MAX_METRIC_STRING_CHARS, MAX_METRICS
from sparkrun.core.short_repr import short_repr
from sparkrun.feedback import FeedbackEvent, FeedbackReporter

__all__ = ["ForeignSpan", "SpanImporter"]

#: Metric names the importer sets itself; a foreign attribute of the same name is not copied.
_RESERVED = frozenset({"started_at", "duration_seconds", "clock", "unit", "worker", "host", "error", "error_type"})
_Scalar = str | int | float | bool


def _printable(text: str) -> str:
    """Foreign text as it may be shown: control characters and lone surrogates become U+FFFD.

    A name or message from another system reaches terminals and JSON encoders; an
    escape sequence in a span name must not redraw someone's screen.
    """
    return text if text.isprintable() else "".join(ch if ch.isprintable() else "\ufffd" for ch in text)


def _own(fields: dict[str, Any]) -> dict[str, Any]:
    """A caller's report fields without the ones the importer sets itself."""
    return {key: value for key, value in fields.items() if key not in ("level", "status")}


def _merged(caller: Mapping[str, Any] | None, own: dict[str, _Scalar]) -> dict[str, Any]:
    """The importer's metrics, then the caller's while the envelope's budget lasts (the rest counted)."""
    metrics: dict[str, Any] = dict(own)
    dropped = int(own.get("dropped_attributes", 0))
    for key, value in (caller or {}).items():
        if key in metrics:
            continue
        if len(metrics) >= MAX_METRICS - 1:
            dropped += 1
            continue
        metrics[key] = value
    if dropped:
        metrics["dropped_attributes"] = dropped
    return metrics


def _seconds_text(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


@dataclass(frozen=True)
class ForeignSpan:
    """One span of another system, as sparkrun imports it.

    ``started_at`` is Unix seconds: the span's clock origin plus its start
    offset. ``duration_seconds`` is set once the span completed, measured on
    that same clock.
    """

    id: str
    name: str
    started_at: float
    parent: str | None = None
    duration_seconds: float | None = None
    failed: bool = False
    error: str | None = None
    host: str | None = None
    unit: str | None = None
    worker: str | None = None
    clock: str | None = None
    attributes: Mapping[str, _Scalar] = field(default_factory=dict)

    def completed(self, duration_seconds: float, *, failed: bool = False, error: str | None = None) -> ForeignSpan:
        """This span as it completed: the same span with its duration and outcome."""
        return replace(self, duration_seconds=duration_seconds, failed=failed, error=error)


class SpanImporter:
    """Imports the spans of one foreign source as children of ``reporter``.

    ``prefix`` names the spans' sources: a span ``capsule.pull`` imported
    with prefix ``coldsnap`` reports as ``coldsnap.capsule.pull`` (a name
    that already starts with the prefix keeps it once). Spans of at least
    ``announce_after`` seconds, and failed ones, are reported at levels a
    terminal shows by default.
    """

    def __init__(self, reporter: FeedbackReporter, *, prefix: str, announce_after: float = 1.0) -> None:
        self._reporter = reporter
        self._prefix = prefix
        self._announce_after = announce_after
        self._reporters: dict[str, FeedbackReporter] = {}
        self._stand_ins: dict[str, FeedbackReporter] = {}
        self._started: set[str] = set()
        self._finished: set[str] = set()

    def activity_id(self, foreign_id: str) -> str:
        """The activity id of a foreign span: scoped by the importing activity."""
        return f"{self._reporter.activity_id}/{_printable(foreign_id)}"

    def started(self, span: ForeignSpan, **fields: Any) -> FeedbackEvent:
        """The span started: open its activity (reported at ``debug`` level); returns the envelope.

        ``fields`` are further report fields (``stage``, counters, ``metrics`` merged
        under the importer's own, a ``message`` of its own); ``level`` and ``status``
        are the importer's to set, so any given are dropped.
        """
        if span.id in self._started or span.id in self._finished:
            raise ValueError(f"span {short_repr(span.id)} was already imported; each span starts once")
        self._started.add(span.id)
        fields = _own(fields)
        message = fields.pop("message", None) or f"{_printable(span.name)} started"
        metrics = _merged(fields.pop("metrics", None), self._metrics(span, terminal=False))
        return self._reporter_of(span).report(message, level="debug", status="running", metrics=metrics, **fields)

    def finished(self, span: ForeignSpan, **fields: Any) -> FeedbackEvent:
        """The span completed (started before or not): its terminal report, with its real times.

        ``fields`` as for :meth:`started`; returns the envelope.
        """
        duration = span.duration_seconds
        if duration is None or not isfinite(duration) or duration < 0:
            raise ValueError(
                f"duration_seconds of span {short_repr(span.id)} is {short_repr(duration)}; "
                "a finished span needs a finite duration of 0 seconds or more"
            )
        if span.id in self._finished:
            raise ValueError(f"span {short_repr(span.id)} already finished; each span finishes once")
        self._finished.add(span.id)
        fields = _own(fields)
        reporter = self._reporter_of(span)
        metrics = _merged(fields.pop("metrics", None), self._metrics(span, terminal=True))
        name = _printable(span.name)
        if span.failed:
            detail = f": {_printable(span.error)}" if span.error else ""
            message = fields.pop("message", None) or f"{name} failed after {_seconds_text(duration)}{detail}"
            return reporter.error(message, status="failed", metrics=metrics, **fields)
        level = "progress" if duration >= self._announce_after else "info"
        message = fields.pop("message", None) or f"{name} done in {_seconds_text(duration)}"
        return reporter.report(message, level=level, status="succeeded", metrics=metrics, **fields)

    def reporter(self, foreign_id: str) -> FeedbackReporter:
        """The reporter of an imported span, for reports between its start and its end."""
        reporter = self._reporters.get(foreign_id)
        if reporter is None:
            raise ValueError(f"span {short_repr(foreign_id)} was not imported")
        return reporter

    def _reporter_of(self, span: ForeignSpan) -> FeedbackReporter:
        reporter = self._reporters.get(span.id)
        if reporter is None:
            parent = self._reporter if span.parent is None else self._parent(span.parent)
            name, host = _printable(span.name), _printable(span.host) if span.host else None
            source = name if name.startswith(f"{self._prefix}.") else f"{self._prefix}.{name}"
            reporter = parent.child(source=source, activity_id=self.activity_id(span.id), host=host)
            self._reporters[span.id] = reporter
        return reporter

    def _parent(self, foreign_id: str) -> FeedbackReporter:
        """The reporter of a foreign parent, or a stand-in with its activity id while it is not imported.

        The stand-in never reports: the trace shows a placeholder span until the
        parent is imported and takes its place.
        """
        parent = self._reporters.get(foreign_id) or self._stand_ins.get(foreign_id)
        if parent is None:
            parent = self._stand_ins[foreign_id] = self._reporter.child(activity_id=self.activity_id(foreign_id))
        return parent

    @staticmethod
    def _metrics(span: ForeignSpan, *, terminal: bool) -> dict[str, _Scalar]:
        metrics: dict[str, _Scalar] = {"started_at": span.started_at}
        if terminal and span.duration_seconds is not None:
            metrics["duration_seconds"] = span.duration_seconds
        for name in ("clock", "unit", "worker"):
            value = getattr(span, name)
            if value is not None:
                metrics[name] = _printable(value)
        dropped = 0
        for key, value in span.attributes.items():
            if key in _RESERVED or key in metrics:
                continue
            if len(metrics) >= MAX_METRICS - 1 or not 0 < len(key) <= MAX_METRIC_KEY_CHARS:
                dropped += 1  # the envelope's budget: keep a slot to say how many did not fit
                continue
            metrics[key] = _printable(value[:MAX_METRIC_STRING_CHARS]) if isinstance(value, str) else value
        if dropped:
            metrics["dropped_attributes"] = dropped
        return metrics
