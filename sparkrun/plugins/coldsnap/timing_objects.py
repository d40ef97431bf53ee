"""The clock and span objects of ColdSnap timing, checked one at a time.

The same objects appear in two places: the live timing stream (``clock``,
``span_start``, ``span_complete`` records) and the receipt's ``timing``. This
module checks the fields of one object; whether its clock and parent exist is
up to the stream or the receipt, which know what came before.

Wall time. A span's offsets are on its own clock, whose origin is an exact
integer of Unix nanoseconds, so the wall start is computed in integers:
``origin_unix_ns`` plus the offset rounded to the nearest nanosecond (the
offset's binary value is used exactly, through :class:`fractions.Fraction`).
:meth:`Span.start_unix_ns` is that exact integer; :meth:`Span.wall_start` is
its correctly rounded float of Unix seconds, which today resolves about a
quarter of a microsecond. A span's wall end is its own start plus its own
duration: durations on different clocks are never added together.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from sparkrun.core.short_repr import short_repr
from sparkrun.plugins.coldsnap.fields import (
    FieldError,
    check_array,
    check_choice,
    check_id,
    check_integer,
    check_keys,
    check_object,
    check_seconds,
    check_text,
)

__all__ = [
    "MAX_ATTRIBUTES",
    "MAX_ATTRIBUTE_KEY_CHARS",
    "MAX_ATTRIBUTE_VALUE_CHARS",
    "MAX_CLOCKS",
    "MAX_CLOCK_SOURCE_CHARS",
    "MAX_SPANS",
    "MAX_SPAN_NAME_CHARS",
    "SPAN_STATUSES",
    "Clock",
    "Span",
    "TimingError",
    "parse_clock",
    "parse_span",
    "start_difference",
    "validate_timing",
]

MAX_CLOCKS = 128
MAX_SPANS = 2048
MAX_ATTRIBUTES = 32
MAX_ATTRIBUTE_KEY_CHARS = 128
MAX_ATTRIBUTE_VALUE_CHARS = 512
MAX_CLOCK_SOURCE_CHARS = 64
MAX_SPAN_NAME_CHARS = 128
SPAN_STATUSES = ("ok", "error")
#: ``origin_unix_ns`` is a positive int64, like every Unix-nanosecond timestamp.
_MAX_UNIX_NS = 2**63 - 1
_NS_PER_SECOND = 1_000_000_000
_CLOCK_KEYS = ("id", "source", "origin_unix_ns")
_CLOCK_OPTIONAL = ("unit", "worker")
_SPAN_KEYS = ("id", "name", "clock", "start_offset_seconds")
_SPAN_OPTIONAL = ("parent", "attributes")
_COMPLETE_KEYS = (*_SPAN_KEYS, "duration_seconds", "status")
_NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})


class TimingError(ValueError):
    """A timing record or the receipt's timing breaks the contract.

    The message names where (a line of the stream, or a path in the receipt),
    the field, the value and the rule or limit. ``line`` is the stream line,
    or None for the receipt's timing.
    """

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass(frozen=True)
class Clock:
    """A clock a controller process measured on: its id, where it lives, and its origin in Unix nanoseconds."""

    id: str
    source: str
    origin_unix_ns: int
    unit: str | None = None
    worker: str | None = None


def _ns(seconds: float) -> int:
    return round(Fraction(seconds) * _NS_PER_SECOND)


@dataclass(frozen=True)
class Span:
    """A timed step on one clock. A started span has no duration or status; a completed one has both.

    ``error`` is the ``error`` attribute of a span that completed with status ``error``.
    """

    id: str
    name: str
    clock: str
    start_offset_seconds: float
    parent: str | None = None
    attributes: Mapping[str, str] = dataclasses.field(default_factory=lambda: _NO_ATTRIBUTES)
    duration_seconds: float | None = None
    status: str | None = None
    error: str | None = None

    def _check_clock(self, clock: Clock) -> None:
        if clock.id != self.clock:
            raise ValueError(f"span {self.id!r} runs on clock {self.clock!r}, not on clock {clock.id!r}")

    def start_unix_ns(self, clock: Clock) -> int:
        """The exact wall start in Unix nanoseconds (``clock`` must be the span's clock)."""
        self._check_clock(clock)
        return clock.origin_unix_ns + _ns(self.start_offset_seconds)

    def wall_start(self, clock: Clock) -> float:
        """The wall start in Unix seconds, the correctly rounded float of :meth:`start_unix_ns`."""
        return self.start_unix_ns(clock) / _NS_PER_SECOND

    def wall_end(self, clock: Clock) -> float | None:
        """The wall end in Unix seconds (start plus this span's duration), or None while it runs."""
        if self.duration_seconds is None:
            return None
        return (self.start_unix_ns(clock) + _ns(self.duration_seconds)) / _NS_PER_SECOND


def parse_clock(field: str, value: Any) -> Clock:
    """The :class:`Clock` in a ``clock`` object; :class:`FieldError` names ``field`` and the broken rule."""
    value = check_object(field, value)
    check_keys(field, value, _CLOCK_KEYS, _CLOCK_OPTIONAL)
    return Clock(
        id=check_id(f"{field}.id", value["id"]),
        source=check_text(f"{field}.source", value["source"], MAX_CLOCK_SOURCE_CHARS),
        origin_unix_ns=check_integer(f"{field}.origin_unix_ns", value["origin_unix_ns"], 1, _MAX_UNIX_NS),
        unit=check_id(f"{field}.unit", value["unit"]) if "unit" in value else None,
        worker=check_id(f"{field}.worker", value["worker"]) if "worker" in value else None,
    )


def _attributes(field: str, value: Any) -> Mapping[str, str]:
    value = check_object(field, value)
    if len(value) > MAX_ATTRIBUTES:
        raise FieldError(f"{field} has {len(value)} entries; the limit is {MAX_ATTRIBUTES}")
    for key, item in value.items():
        check_text(f"{field} key {short_repr(key)}", key, MAX_ATTRIBUTE_KEY_CHARS)
        check_text(f"{field}[{key!r}]", item, MAX_ATTRIBUTE_VALUE_CHARS, allow_empty=True)
    return MappingProxyType(dict(value))


def parse_span(field: str, value: Any, *, complete: bool) -> Span:
    """The :class:`Span` in a ``span`` object; a complete one also needs ``duration_seconds`` and ``status``.

    References (``clock``, ``parent``) are checked for form only here.
    """
    value = check_object(field, value)
    check_keys(field, value, _COMPLETE_KEYS if complete else _SPAN_KEYS, _SPAN_OPTIONAL)
    span_id = check_id(f"{field}.id", value["id"])
    name = check_text(f"{field}.name", value["name"], MAX_SPAN_NAME_CHARS)
    clock = check_id(f"{field}.clock", value["clock"])
    parent = check_id(f"{field}.parent", value["parent"]) if "parent" in value else None
    if parent == span_id:
        raise FieldError(f"{field}.parent is {parent!r}, the span's own id; a span cannot be its own parent")
    offset = check_seconds(f"{field}.start_offset_seconds", value["start_offset_seconds"])
    attributes = _attributes(f"{field}.attributes", value["attributes"]) if "attributes" in value else _NO_ATTRIBUTES
    if not complete:
        return Span(span_id, name, clock, offset, parent, attributes)
    duration = check_seconds(f"{field}.duration_seconds", value["duration_seconds"])
    status = check_choice(f"{field}.status", value["status"], SPAN_STATUSES)
    error = attributes.get("error") if status == "error" else None
    return Span(span_id, name, clock, offset, parent, attributes, duration, status, error)


def start_difference(field: str, start: Span, complete: Span) -> str | None:
    """How ``complete`` fails to repeat ``start`` (one sentence naming the field), or None if it does.

    The one allowed change: a span completing with status ``error`` may add an
    ``error`` attribute that its start did not have.
    """
    for name in ("name", "clock", "parent", "start_offset_seconds"):
        now, was = getattr(complete, name), getattr(start, name)
        if now != was:
            return f"{field}.{name} is {short_repr(now)}, but its start had {short_repr(was)}"
    added_error = complete.status == "error" and "error" not in start.attributes
    for key in sorted({*start.attributes, *complete.attributes}):
        now_text, was_text = complete.attributes.get(key), start.attributes.get(key)
        if now_text == was_text or (key == "error" and was_text is None and added_error):
            continue
        now_part = "absent" if now_text is None else short_repr(now_text)
        was_part = "no such attribute" if was_text is None else short_repr(was_text)
        adding_error = key == "error" and was_text is None
        rule = " (only a span completing with status error may add an error attribute)" if adding_error else ""
        return f"{field}.attributes[{key!r}] is {now_part}, but its start had {was_part}{rule}"
    return None


def _check_tree(field: str, spans: list[Span]) -> None:
    """Every parent exists and no chain of parents comes back to where it started."""
    index = {span.id: position for position, span in enumerate(spans)}
    rooted: set[str] = set()
    for position, span in enumerate(spans):
        if span.parent is not None and span.parent not in index:
            raise FieldError(f"{field}[{position}].parent is {span.parent!r}; {field} has no span with that id")
    for position, span in enumerate(spans):
        chain: list[str] = []
        current: Span | None = span
        while current is not None and current.id not in rooted:
            if current.id in chain:
                raise FieldError(
                    f"{field}[{position}].parent is {span.parent!r}, which leads back to {current.id!r}; "
                    "parents must form a tree"
                )
            chain.append(current.id)
            current = spans[index[current.parent]] if current.parent is not None else None
        rooted.update(chain)


def validate_timing(value: Any, field: str = "timing") -> tuple[dict[str, Clock], list[Span]]:
    """The clocks (by id) and completed spans of a receipt's ``timing`` object.

    ``{"format": 1, "clocks": [...], "spans": [...]}`` with 1 to 128 clocks and
    1 to 2048 completed spans, unique ids, and every span's clock and parent
    present (anywhere in the lists: a receipt has no order to keep). Raises
    :class:`TimingError` naming the path, e.g. ``timing.spans[3].duration_seconds``.
    """
    try:
        timing = check_object(field, value)
        check_keys(field, timing, ("format", "clocks", "spans"))
        if type(timing["format"]) is not int or timing["format"] != 1:
            raise FieldError(f"{field}.format is {short_repr(timing['format'])}; expected 1")
        clocks: dict[str, Clock] = {}
        first_clock: dict[str, int] = {}
        for position, item in enumerate(check_array(f"{field}.clocks", timing["clocks"], 1, MAX_CLOCKS)):
            clock = parse_clock(f"{field}.clocks[{position}]", item)
            if clock.id in clocks:
                raise FieldError(
                    f"{field}.clocks[{position}].id is {clock.id!r}; {field}.clocks[{first_clock[clock.id]}] "
                    "has the same id"
                )
            clocks[clock.id], first_clock[clock.id] = clock, position
        spans: list[Span] = []
        first_span: dict[str, int] = {}
        for position, item in enumerate(check_array(f"{field}.spans", timing["spans"], 1, MAX_SPANS)):
            span = parse_span(f"{field}.spans[{position}]", item, complete=True)
            if span.id in first_span:
                raise FieldError(
                    f"{field}.spans[{position}].id is {span.id!r}; {field}.spans[{first_span[span.id]}] has the same id"
                )
            if span.clock not in clocks:
                raise FieldError(
                    f"{field}.spans[{position}].clock is {span.clock!r}; {field}.clocks has no clock with that id"
                )
            spans.append(span)
            first_span[span.id] = position
        _check_tree(f"{field}.spans", spans)
    except FieldError as exc:
        raise TimingError(str(exc)) from None
    return clocks, spans
