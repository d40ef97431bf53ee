"""Trace and span ids derived from sparkrun's own ids, and the W3C context of a process sparkrun starts.

The trace id of an operation is its operation id. Span ids are a hash of
(operation id, kind, key), so the same events exported twice (live, then
replayed from a journal) yield the same ids, and an activity id chosen by a
producer can never collide with the root or a launch phase. They live in
the core, not the adapter, because a process sparkrun starts is told its
parent span (``TRACEPARENT``) whether telemetry is on in this process or not.
"""

from __future__ import annotations

from hashlib import blake2b

__all__ = ["activity_span_id", "phase_span_id", "root_span_id", "trace_environment", "trace_id_of", "traceparent"]


def trace_id_of(operation_id: str) -> int:
    """The OpenTelemetry trace id of an operation (its 32-hex id as an integer)."""
    value = int(operation_id, 16) if len(operation_id) == 32 else 0
    if value == 0:
        raise ValueError(f"operation_id is {operation_id!r}; it must be 32 hex characters, not all zero")
    return value


def _span_id(operation_id: str, kind: str, key: str) -> int:
    digest = blake2b(f"{kind}\x00{operation_id}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") or 1


def root_span_id(operation_id: str) -> int:
    return _span_id(operation_id, "root", "")


def activity_span_id(operation_id: str, activity_id: str) -> int:
    return _span_id(operation_id, "activity", activity_id)


def phase_span_id(operation_id: str, slug: str) -> int:
    return _span_id(operation_id, "phase", slug)


def traceparent(operation_id: str, activity_id: str) -> str:
    """The W3C ``traceparent`` of a process started by the activity: its span is the parent."""
    return f"00-{trace_id_of(operation_id):032x}-{activity_span_id(operation_id, activity_id):016x}-01"


def trace_environment(operation_id: str, activity_id: str) -> dict[str, str]:
    """The environment that makes a process sparkrun starts join the trace under the activity's span.

    sparkrun keeps no vendor trace state, so ``TRACESTATE`` is not set (the
    W3C rules allow its absence).
    """
    return {"TRACEPARENT": traceparent(operation_id, activity_id)}
