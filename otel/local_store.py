"""The embedded trace backend: OTLP/JSON files under the state directory.

Each trace gets its own file, ``<state_dir>/traces/<trace_id>.jsonl``, one
``TracesData`` line per export batch, so a lookup by operation id opens one
file and an OpenTelemetry Collector's OTLP JSON file receiver can ingest the
directory later (``include: [<state_dir>/traces/*.jsonl]``). The newest
``max_traces`` files are kept.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel.otlp_json import attributes_of, context_of, encode_spans

__all__ = ["DEFAULT_MAX_TRACES", "LocalSpanExporter", "StoredSpan", "TraceStore", "TraceSummary"]

_log = logging.getLogger(__name__)
DEFAULT_MAX_TRACES = 1000
_PRUNE_EVERY = 50


@dataclass(frozen=True)
class StoredSpan:
    """A span read back from the store, decoded for display."""

    trace_id: str
    span_id: str
    parent_span_id: str | None
    name: str
    start_ns: int
    end_ns: int
    status_code: int
    status_message: str
    attributes: dict[str, Any]
    events: list[dict[str, Any]]
    dropped_events: int

    @property
    def duration_seconds(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9

    @property
    def status(self) -> str:
        return ("unset", "ok", "error")[self.status_code] if 0 <= self.status_code <= 2 else "unset"


@dataclass(frozen=True)
class TraceSummary:
    """One line of ``sparkrun trace list``."""

    trace_id: str
    name: str
    start_ns: int
    duration_seconds: float
    status: str
    span_count: int

    def to_json(self) -> dict[str, Any]:
        return {
            "operation_id": self.trace_id,
            "operation": self.name,
            "start_unix_nano": self.start_ns,
            "duration_seconds": self.duration_seconds,
            "status": self.status,
            "spans": self.span_count,
        }


def _decode_span(raw: dict[str, Any]) -> StoredSpan:
    status = raw.get("status") or {}
    events = [
        {
            "name": e.get("name", ""),
            "time_ns": int(e.get("timeUnixNano", 0)),
            "attributes": attributes_of(e.get("attributes")),
        }
        for e in raw.get("events") or ()
    ]
    return StoredSpan(
        trace_id=raw["traceId"],
        span_id=raw["spanId"],
        parent_span_id=raw.get("parentSpanId") or None,
        name=raw.get("name", ""),
        start_ns=int(raw.get("startTimeUnixNano", 0)),
        end_ns=int(raw.get("endTimeUnixNano", 0)),
        status_code=int(status.get("code", 0)),
        status_message=status.get("message", ""),
        attributes=attributes_of(raw.get("attributes")),
        events=events,
        dropped_events=int(raw.get("droppedEventsCount", 0)),
    )


class TraceStore:
    """Reads and writes the per-trace OTLP/JSON files of one directory."""

    def __init__(self, directory: Path | str, *, max_traces: int = DEFAULT_MAX_TRACES) -> None:
        self.directory = Path(directory)
        self.max_traces = max_traces
        self._lock = threading.Lock()
        self._writes = 0

    @classmethod
    def in_state_dir(cls, state_dir: Path | str, **kwargs: Any) -> TraceStore:
        return cls(Path(state_dir) / "traces", **kwargs)

    def path_of(self, trace_id: str) -> Path:
        return self.directory / f"{trace_id}.jsonl"

    def write(self, spans: Sequence[ReadableSpan]) -> None:
        """Append ``spans`` to the files of their traces."""
        by_trace: dict[int, list[ReadableSpan]] = defaultdict(list)
        for span in spans:
            by_trace[context_of(span).trace_id].append(span)
        with self._lock:
            self.directory.mkdir(parents=True, exist_ok=True)
            for trace_id, members in by_trace.items():
                line = json.dumps(encode_spans(members), separators=(",", ":"))
                path = self.path_of(f"{trace_id:032x}")
                before = path.stat().st_mtime_ns if path.exists() else 0
                with open(path, "a", encoding="utf-8") as file:
                    file.write(line + "\n")
                # A file's time is its trace's latest span end, not when it was written: a replay of an old
                # trace does not make it the newest.
                ended = max(span.end_time or 0 for span in members)
                os.utime(path, ns=(time.time_ns(), max(before, ended)))
            self._writes += 1
            if self._writes % _PRUNE_EVERY == 1:
                self._prune()

    def _prune(self) -> None:
        files = sorted(self.directory.glob("*.jsonl"), key=lambda p: p.stat().st_mtime, reverse=True)
        for stale in files[self.max_traces :]:
            stale.unlink(missing_ok=True)

    def spans(self, trace_id: str) -> list[StoredSpan]:
        """Every span stored for ``trace_id``, in start order; empty if unknown."""
        path = self.path_of(trace_id.lower())
        if not path.is_file():
            return []
        spans: dict[str, StoredSpan] = {}  # by span id: a replay of the same events writes the same ids again
        with open(path, encoding="utf-8") as file:
            for number, line in enumerate(file, start=1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError:
                    _log.warning("skipping unreadable line %d of %s", number, path)
                    continue
                for resource_spans in data.get("resourceSpans", ()):
                    for scope_spans in resource_spans.get("scopeSpans", ()):
                        for raw in scope_spans.get("spans", ()):
                            span = _decode_span(raw)
                            spans[span.span_id] = span
        return sorted(spans.values(), key=lambda span: (span.start_ns, span.span_id))

    def trace_ids(self) -> list[str]:
        """Stored trace ids, the one that ended last first."""
        if not self.directory.is_dir():
            return []
        files = sorted(self.directory.glob("*.jsonl"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        return [path.stem for path in files]

    def summaries(self, limit: int = 20) -> list[TraceSummary]:
        """The most recent traces, the one that started last first."""
        summaries = []
        for trace_id in self.trace_ids()[:limit]:
            spans = self.spans(trace_id)
            if not spans:
                continue
            roots = [span for span in spans if span.parent_span_id is None] or spans
            root = roots[0]
            summaries.append(
                TraceSummary(trace_id, root.name, root.start_ns, root.duration_seconds, root.status, len(spans))
            )
        return sorted(summaries, key=lambda summary: summary.start_ns, reverse=True)


class LocalSpanExporter(SpanExporter):
    """A span exporter that writes to a :class:`TraceStore`."""

    def __init__(self, store: TraceStore) -> None:
        self.store = store

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            self.store.write(spans)
        except OSError as error:
            _log.warning("could not write spans to %s: %s", self.store.directory, os.strerror(error.errno or 0))
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True
