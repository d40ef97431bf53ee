"""The ColdSnap timing stream, validated record by record while the controller runs.

A controller writes one NDJSON record per line; sparkrun reads the lines as
they appear (see :mod:`.timing_file`) and feeds each to a
:class:`TimingStream`, which checks it against everything before it and only
then applies it, so a bad line is never half-applied. After the first
:class:`TimingError` the stream is dead: every later :meth:`TimingStream.feed`
raises the same error, because records after a broken one cannot be trusted
to mean what they say.

What the stream checks: every rule of the contract's "Timing stream" section
(exact keys, ``sequence`` 1, 2, 3 ... up to 8192, the request id, a constant
``request_sha256``, clock and span fields, references to earlier clocks and
spans, no duplicate start or complete, a complete repeating its start, limits,
and what ``stream_complete`` needs). What it does not check: which digest
``request_sha256`` should be. The receipt is authoritative, and a stream that
disagrees with it is only a warning (:func:`.receipt.stream_warnings`), so the
stream records the value it saw and requires only that it never changes.

sparkrun's readings where the contract is silent: ``stream_start`` is
optional but, when present, is the first record; a line is at most 65536
bytes without its newline; optional fields (``unit``, ``worker``,
``parent``, ``attributes``) are omitted when absent, never ``null``;
``start_offset_seconds`` is a finite number >= 0; span ids are not required
to look like ``<clock id>-<n>`` (that is a naming habit, not a rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from sparkrun.plugins.coldsnap.canonical import strict_loads
from sparkrun.plugins.coldsnap.fields import (
    FieldError,
    check_choice,
    check_digest,
    check_integer,
    check_keys,
    check_object,
    quote,
)
from sparkrun.plugins.coldsnap.timing_file import MAX_RECORD_BYTES, MAX_RECORDS, TimingFile
from sparkrun.plugins.coldsnap.timing_objects import (
    MAX_CLOCKS,
    MAX_SPANS,
    Clock,
    Span,
    TimingError,
    parse_clock,
    parse_span,
    start_difference,
    validate_timing,
)

__all__ = [
    "EVENTS",
    "MAX_RECORDS",
    "MAX_RECORD_BYTES",
    "STREAM_STATES",
    "TIMING_KIND",
    "Clock",
    "Span",
    "TimingError",
    "TimingFile",
    "TimingRecord",
    "TimingStream",
    "validate_timing",
]

TIMING_KIND = "coldsnap-timing-event"
STREAM_STATES = ("succeeded", "failed")
_BASE_KEYS = ("format", "kind", "sequence", "event", "operation_id", "request_sha256")
#: The keys each event adds to the base keys.
EVENTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "stream_start": (),
        "clock": ("clock",),
        "span_start": ("span",),
        "span_complete": ("span",),
        "stream_complete": ("state", "timing_sha256"),
    }
)


@dataclass(frozen=True)
class TimingRecord:
    """One accepted record: its line, sequence and event, and what it carried."""

    line: int
    sequence: int
    event: str
    request_sha256: str
    clock: Clock | None = None
    span: Span | None = None
    state: str | None = None
    timing_sha256: str | None = None


def _exact_one(field: str, value: Any) -> None:
    if type(value) is not int or value != 1:
        raise FieldError(f"{field} is {quote(value)}; expected 1")


class TimingStream:
    """The timing stream of one operation, as far as it has been read."""

    def __init__(self, operation_id: str) -> None:
        self.operation_id = operation_id
        self._lines = 0
        self._failure: TimingError | None = None
        self._request_sha256: str | None = None
        self._clocks: dict[str, Clock] = {}
        self._open: dict[str, tuple[Span, int]] = {}
        self._completed: dict[str, int] = {}
        self._spans: list[Span] = []
        self._end: TimingRecord | None = None

    @property
    def complete(self) -> bool:
        """Whether ``stream_complete`` was read."""
        return self._end is not None

    @property
    def state(self) -> str | None:
        """``succeeded`` or ``failed`` from ``stream_complete``, else None."""
        return self._end.state if self._end else None

    @property
    def timing_sha256(self) -> str | None:
        """The digest ``stream_complete`` announced for the receipt's timing, else None."""
        return self._end.timing_sha256 if self._end else None

    @property
    def request_sha256(self) -> str | None:
        """The ``request_sha256`` the records carry (None before the first record)."""
        return self._request_sha256

    @property
    def clocks(self) -> Mapping[str, Clock]:
        """Declared clocks by id."""
        return MappingProxyType(self._clocks)

    @property
    def spans(self) -> tuple[Span, ...]:
        """Completed spans, in the order they completed."""
        return tuple(self._spans)

    @property
    def open_spans(self) -> Mapping[str, Span]:
        """Started spans that have not completed, by id."""
        return MappingProxyType({span_id: span for span_id, (span, _) in self._open.items()})

    @property
    def records(self) -> int:
        """How many records were accepted."""
        return self._lines if self._failure is None else self._lines - 1

    @property
    def failure(self) -> str | None:
        """The message of the error that killed the stream, if one did."""
        return str(self._failure) if self._failure else None

    def feed(self, line: bytes) -> TimingRecord:
        """Check one line (its newline optional) and apply it; :class:`TimingError` if it breaks a rule."""
        if self._failure is not None:
            raise TimingError(str(self._failure), self._failure.line)
        self._lines += 1
        try:
            record = self._check(line)
        except FieldError as exc:
            self._failure = TimingError(f"timing line {self._lines}: {exc}", self._lines)
            raise TimingError(str(self._failure), self._lines) from None
        self._apply(record)
        return record

    def _check(self, line: bytes) -> TimingRecord:
        if self._end is not None:
            raise FieldError(f"a record after stream_complete (line {self._end.line}); the stream has ended")
        if line.endswith(b"\n"):
            line = line[:-1]
        if len(line) > MAX_RECORD_BYTES:
            raise FieldError(f"the record is {len(line)} bytes long; the limit is {MAX_RECORD_BYTES} bytes")
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FieldError(f"the record is not UTF-8 (byte {exc.start})") from None
        try:
            value = strict_loads(text)
        except ValueError as exc:
            raise FieldError(f"{exc}; a line must be one JSON object") from None
        record = check_object("the record", value)
        if "event" not in record:
            raise FieldError("the record has no 'event'; it is required")
        event = check_choice("event", record["event"], tuple(EVENTS))
        check_keys(f"the {event} record", record, (*_BASE_KEYS, *EVENTS[event]))
        base = TimingRecord(self._lines, self._lines, event, self._check_base(record))
        if event == "stream_start":
            if self._lines != 1:
                raise FieldError(f"stream_start is record {self._lines}; it may only be the first record")
            return base
        if event == "clock":
            return replace(base, clock=self._check_clock(record["clock"]))
        if event == "stream_complete":
            return replace(base, state=self._check_end(record), timing_sha256=record["timing_sha256"])
        return replace(base, span=self._check_span(event, record["span"]))

    def _check_base(self, record: dict[str, Any]) -> str:
        """The record's ``request_sha256``, once the base keys passed (``sequence`` is the line number)."""
        _exact_one("format", record["format"])
        if record["kind"] != TIMING_KIND:
            raise FieldError(f"kind is {quote(record['kind'])}; expected {TIMING_KIND!r}")
        sequence = check_integer("sequence", record["sequence"], 1, MAX_RECORDS)
        if sequence != self._lines:
            raise FieldError(
                f"sequence is {sequence}; expected {self._lines} (sequences count 1, 2, 3 ... without gaps)"
            )
        if record["operation_id"] != self.operation_id:
            raise FieldError(
                f"operation_id is {quote(record['operation_id'])}; expected {self.operation_id!r}, the request's id"
            )
        digest = check_digest("request_sha256", record["request_sha256"])
        if self._request_sha256 is not None and digest != self._request_sha256:
            raise FieldError(
                f"request_sha256 is {digest!r}, but earlier records had {self._request_sha256!r}; it must not change"
            )
        return digest

    def _check_clock(self, value: Any) -> Clock:
        clock = parse_clock("clock", value)
        if clock.id in self._clocks:
            raise FieldError(f"clock.id is {clock.id!r}; a clock with that id was already declared")
        if len(self._clocks) >= MAX_CLOCKS:
            raise FieldError(
                f"clock {clock.id!r} would be clock number {MAX_CLOCKS + 1}; the limit is {MAX_CLOCKS} per operation"
            )
        return clock

    def _check_span(self, event: str, value: Any) -> Span:
        span = parse_span("span", value, complete=event == "span_complete")
        if span.id in self._completed:
            raise FieldError(f"span {span.id!r} already completed on line {self._completed[span.id]}")
        started = self._open.get(span.id)
        if started is not None:
            if event == "span_start":
                raise FieldError(f"span {span.id!r} already started on line {started[1]}")
            difference = start_difference("span", started[0], span)
            if difference is not None:
                raise FieldError(f"{difference} (span_start on line {started[1]}); a complete repeats its start")
            return span
        if span.clock not in self._clocks:
            raise FieldError(f"span.clock is {span.clock!r}; no clock with that id was declared before")
        if span.parent is not None and span.parent not in self._open and span.parent not in self._completed:
            raise FieldError(f"span.parent is {span.parent!r}; no span with that id appeared before")
        if len(self._open) + len(self._completed) >= MAX_SPANS:
            raise FieldError(
                f"span {span.id!r} would be span number {MAX_SPANS + 1}; the limit is {MAX_SPANS} per operation"
            )
        return span

    def _check_end(self, record: dict[str, Any]) -> str:
        """The final state, once ``stream_complete`` passed its checks."""
        state = check_choice("state", record["state"], STREAM_STATES)
        check_digest("timing_sha256", record["timing_sha256"])
        if not self._clocks:
            raise FieldError("stream_complete before any clock; a stream needs at least 1 clock")
        if not self._open and not self._completed:
            raise FieldError("stream_complete before any span; a stream needs at least 1 span")
        if self._open:
            names = ", ".join(repr(span_id) for span_id in list(self._open)[:5])
            more = ", ..." if len(self._open) > 5 else ""
            raise FieldError(f"stream_complete while {len(self._open)} span(s) are still open: {names}{more}")
        return state

    def _apply(self, record: TimingRecord) -> None:
        self._request_sha256 = record.request_sha256
        if record.clock is not None:
            self._clocks[record.clock.id] = record.clock
        elif record.span is not None and record.event == "span_start":
            self._open[record.span.id] = (record.span, record.line)
        elif record.span is not None:
            self._open.pop(record.span.id, None)
            self._completed[record.span.id] = record.line
            self._spans.append(record.span)
        elif record.event == "stream_complete":
            self._end = record
