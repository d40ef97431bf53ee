"""Builders of valid ColdSnap wire objects for the tests; each test breaks one thing."""

from __future__ import annotations

import copy
import json
from typing import Any

from sparkrun.plugins.coldsnap.canonical import sha256_digest
from sparkrun.plugins.coldsnap.timing import TimingStream

OPERATION_ID = "example-coldsnap-restore"
REQUEST_SHA = "sha256:" + "a1" * 32
OTHER_SHA = "sha256:" + "b2" * 32
ORIGIN_NS = 1_700_000_000_123_456_789


def clock(clock_id: str = "controller", **fields: Any) -> dict[str, Any]:
    return {"id": clock_id, "source": "controller", "origin_unix_ns": ORIGIN_NS, **fields}


def span(span_id: str = "controller-1", **fields: Any) -> dict[str, Any]:
    return {"id": span_id, "name": "coldsnap.controller", "clock": "controller", "start_offset_seconds": 0.5, **fields}


def done(started: dict[str, Any], duration: float = 1.25, status: str = "ok", **fields: Any) -> dict[str, Any]:
    """The span_complete object repeating ``started``."""
    return {**copy.deepcopy(started), "duration_seconds": duration, "status": status, **fields}


def record(sequence: int, event: str, **fields: Any) -> dict[str, Any]:
    return {
        "format": 1,
        "kind": "coldsnap-timing-event",
        "sequence": sequence,
        "event": event,
        "operation_id": OPERATION_ID,
        "request_sha256": REQUEST_SHA,
        **fields,
    }


def numbered(*events: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Records for ``(event, added fields)`` pairs, numbered 1, 2, 3 ..."""
    return [record(index, event, **fields) for index, (event, fields) in enumerate(events, start=1)]


def line(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8") + b"\n"


def end(state: str = "succeeded", timing_sha256: str = OTHER_SHA) -> tuple[str, dict[str, Any]]:
    return ("stream_complete", {"state": state, "timing_sha256": timing_sha256})


def typical_events() -> list[tuple[str, dict[str, Any]]]:
    """A restore's stream: a controller span, a worker clock with a nested span, a span completed without start."""
    top = span()
    worker = span("worker-0-1", name="runtime.startup_port_open", clock="worker-0", parent="controller-1")
    worker["attributes"] = {"unit": "unit-0", "phase": "execute"}
    late = span("adapter-1", name="coldsnap.images", parent="controller-1", start_offset_seconds=0.75)
    return [
        ("stream_start", {}),
        ("clock", {"clock": clock()}),
        ("span_start", {"span": top}),
        ("clock", {"clock": clock("worker-0", source="worker", unit="unit-0", worker="worker-0")}),
        ("span_start", {"span": worker}),
        ("span_complete", {"span": done(worker, 2.5)}),
        ("span_complete", {"span": done(late, 0.125)}),
        ("span_complete", {"span": done(top, 4.0)}),
    ]


def typical_stream() -> list[dict[str, Any]]:
    return numbered(*typical_events(), end())


def feed_all(records: list[dict[str, Any]], operation_id: str = OPERATION_ID) -> TimingStream:
    stream = TimingStream(operation_id)
    for item in records:
        stream.feed(line(item))
    return stream


def timing_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The receipt ``timing`` object a controller writes for the clocks and completed spans of ``records``."""
    return {
        "format": 1,
        "clocks": [item["clock"] for item in records if item["event"] == "clock"],
        "spans": [item["span"] for item in records if item["event"] == "span_complete"],
    }


def receipt(**fields: Any) -> dict[str, Any]:
    """A succeeded restore receipt whose timing is the typical stream's."""
    return {
        "format": 2,
        "kind": "coldsnap-operation-receipt",
        "operation_id": OPERATION_ID,
        "operation": "restore",
        "state": "succeeded",
        "request_sha256": REQUEST_SHA,
        "engine": "process",
        "snapshot_driver": "n580",
        "replay_semantics": "reconcile-replace",
        "started_at": "2025-01-31T12:00:00.123456789Z",
        "completed_at": "2025-01-31T12:00:04.5Z",
        "duration_seconds": 4.376543211,
        "timing": timing_of(typical_stream()),
        "result": {"artifact": {"provider": "file", "uri": "/srv/artifacts/chat"}},
        **fields,
    }


def request(**fields: Any) -> dict[str, Any]:
    """The parts of a restore request that receipts and preparations are checked against."""
    return {
        "format": 4,
        "kind": "coldsnap-operation-request",
        "id": OPERATION_ID,
        "operation": "restore",
        "snapshot_driver": {"id": "n580"},
        "launch": {"engine": "process", "model": {"id": "tiny-echo"}},
        "artifact": {"provider": "file", "uri": "/srv/artifacts/chat"},
        **fields,
    }


def complete_stream_for(receipt_value: dict[str, Any], state: str = "succeeded") -> list[dict[str, Any]]:
    """The typical stream, ending with the digest of ``receipt_value``'s timing."""
    return numbered(*typical_events(), end(state, sha256_digest(receipt_value["timing"])))
