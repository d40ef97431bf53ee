"""The controller's timing stream: clocks and spans, written as NDJSON while they happen.

Each record is one line, flushed at once, so sparkrun can follow the file live. The same
clocks and completed spans make up the receipt's ``timing`` object, whose canonical digest
``stream_complete`` carries. Offsets and durations come from ``time.monotonic_ns``; each
clock pairs a monotonic origin with the Unix time taken at the same moment.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["Clock", "Span", "TimingStream", "now_ns"]

MAX_RECORD_BYTES = 64 * 1024
MAX_RECORDS = 8192
MAX_CLOCKS = 128
MAX_SPANS = 2048
MAX_ATTRIBUTES = 32
MAX_ATTRIBUTE_CHARS = 512
MAX_NAME_CHARS = 128


def now_ns() -> int:
    """The monotonic instant every offset and duration is measured from."""
    return time.monotonic_ns()


def _seconds(nanoseconds: int) -> float:
    return round(nanoseconds / 1e9, 9)


def attribute_text(value: Any) -> str:
    """Attribute values are text of at most 512 characters; booleans read as JSON does."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return text if len(text) <= MAX_ATTRIBUTE_CHARS else text[: MAX_ATTRIBUTE_CHARS - 3] + "..."


@dataclass
class Clock:
    """One time base: the controller's, or one per worker, each with its own origin."""

    id: str
    source: str
    origin_mono_ns: int
    origin_unix_ns: int
    unit: str | None = None
    worker: str | None = None
    spans_made: int = 0

    def offset(self, mono_ns: int) -> float:
        return _seconds(mono_ns - self.origin_mono_ns)

    def as_json(self) -> dict[str, Any]:
        clock: dict[str, Any] = {"id": self.id, "source": self.source, "origin_unix_ns": self.origin_unix_ns}
        if self.unit is not None:
            clock["unit"] = self.unit
        if self.worker is not None:
            clock["worker"] = self.worker
        return clock


@dataclass
class Span:
    """A started span; ``as_start`` is exactly what its ``span_complete`` repeats."""

    id: str
    name: str
    clock: Clock
    parent: str | None
    start_ns: int
    attributes: dict[str, str] = field(default_factory=dict)
    completed: bool = False

    def as_start(self) -> dict[str, Any]:
        span: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "clock": self.clock.id,
            "start_offset_seconds": self.clock.offset(self.start_ns),
        }
        if self.parent is not None:
            span["parent"] = self.parent
        if self.attributes:
            span["attributes"] = dict(self.attributes)
        return span


class TimingStream:
    """Declares clocks, starts and completes spans, and keeps what the receipt's ``timing`` needs.

    ``sink`` is the open timing file (or stdout), or None when the invocation asked for no stream.
    ``stream_request_sha256`` is what the records carry; it differs from the real digest only when
    a misbehaviour mode asks for a wrong one.
    """

    def __init__(self, sink: TextIO | None, operation_id: str, stream_request_sha256: str) -> None:
        self._sink = sink
        self._base = {
            "format": 1,
            "kind": "coldsnap-timing-event",
            "operation_id": operation_id,
            "request_sha256": stream_request_sha256,
        }
        self._lock = threading.Lock()
        self._sequence = 0
        self.clocks: list[Clock] = []
        self.completed: list[dict[str, Any]] = []
        self._open: dict[str, Span] = {}
        self._emit("stream_start", {})

    def _emit(self, event: str, extra: dict[str, Any]) -> None:
        with self._lock:
            if self._sequence >= MAX_RECORDS:
                raise RuntimeError(f"the timing stream is full ({MAX_RECORDS} records)")
            self._sequence += 1
            record = {**self._base, "sequence": self._sequence, "event": event, **extra}
            line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
            if len(line) + 1 > MAX_RECORD_BYTES:
                raise RuntimeError(f"a timing record is longer than {MAX_RECORD_BYTES} bytes (event={event})")
            if self._sink is not None:
                self._sink.write(line + "\n")
                self._sink.flush()

    def clock(self, clock_id: str, *, unit: str | None = None, worker: str | None = None) -> Clock:
        """Declare a clock whose origin is now; its record goes out before any span on it."""
        if len(self.clocks) >= MAX_CLOCKS:
            raise RuntimeError(f"too many clocks (at most {MAX_CLOCKS})")
        mono, unix = now_ns(), time.time_ns()
        clock = Clock(clock_id, "time.monotonic", mono, unix, unit=unit, worker=worker)
        self.clocks.append(clock)
        self._emit("clock", {"clock": clock.as_json()})
        return clock

    def _new_span(
        self, name: str, clock: Clock, parent: Span | None, start_ns: int, attributes: dict[str, Any] | None
    ) -> Span:
        if len(name) > MAX_NAME_CHARS:
            raise ValueError(f"span name longer than {MAX_NAME_CHARS} characters: {name[:40]}...")
        attributes = {key: attribute_text(value) for key, value in (attributes or {}).items() if value is not None}
        if len(attributes) >= MAX_ATTRIBUTES:  # one slot stays free for an error attribute
            raise ValueError(f"span {name} has more than {MAX_ATTRIBUTES - 1} attributes")
        if len(self.completed) + len(self._open) >= MAX_SPANS:
            raise RuntimeError(f"too many spans (at most {MAX_SPANS})")
        clock.spans_made += 1
        return Span(f"{clock.id}-{clock.spans_made}", name, clock, parent.id if parent else None, start_ns, attributes)

    def start(
        self,
        name: str,
        clock: Clock,
        parent: Span | None,
        attributes: dict[str, Any] | None = None,
        start_ns: int | None = None,
    ) -> Span:
        """Announce a span that started now (or at ``start_ns``, a moment ago)."""
        span = self._new_span(name, clock, parent, now_ns() if start_ns is None else start_ns, attributes)
        self._open[span.id] = span
        self._emit("span_start", {"span": span.as_start()})
        return span

    def complete(self, span: Span, error: str | None = None) -> None:
        """Complete a started span; a failure adds the ``error`` attribute and status ``error``."""
        if span.completed:
            return
        span.completed = True
        self._open.pop(span.id, None)
        self._completion(span, now_ns(), error)

    def record(
        self,
        name: str,
        clock: Clock,
        parent: Span | None,
        start_ns: int,
        attributes: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> None:
        """A span that completes now and was never announced: for results known only at its end."""
        span = self._new_span(name, clock, parent, start_ns, attributes)
        span.completed = True
        self._completion(span, now_ns(), error)

    def _completion(self, span: Span, end_ns: int, error: str | None) -> None:
        body = span.as_start()
        if error is not None:
            body["attributes"] = {**body.get("attributes", {}), "error": attribute_text(error or "failed")}
        body["duration_seconds"] = _seconds(max(0, end_ns - span.start_ns))
        body["status"] = "ok" if error is None else "error"
        self.completed.append(body)
        self._emit("span_complete", {"span": body})

    @property
    def open_spans(self) -> list[Span]:
        return list(self._open.values())

    def timing(self) -> dict[str, Any]:
        """The receipt's ``timing`` object: the clocks as declared and the spans as completed."""
        return {"format": 1, "clocks": [clock.as_json() for clock in self.clocks], "spans": list(self.completed)}

    def finish(self, state: str, timing_sha256: str) -> None:
        """``stream_complete``: only once every span is complete."""
        if self._open:
            raise RuntimeError(f"spans still open at the end of the stream: {', '.join(self._open)}")
        self._emit("stream_complete", {"state": state, "timing_sha256": timing_sha256})
