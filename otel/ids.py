"""Trace and span ids derived from sparkrun's own ids.

The trace id of an operation is its operation id. Span ids are a hash of
(operation id, kind, key), so exporting the same events twice (live, then
replayed from a journal) yields the same ids, and an activity id chosen by a
producer can never collide with the root or a launch phase.
"""

from __future__ import annotations

import threading
from hashlib import blake2b

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

__all__ = ["OperationIdGenerator", "activity_span_id", "phase_span_id", "root_span_id", "trace_id_of"]


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


class OperationIdGenerator(IdGenerator):
    """The id generator of a tracer provider whose sparkrun spans carry sparkrun's ids.

    Give it to the provider (``TracerProvider(id_generator=OperationIdGenerator())``;
    ``otel.configure()`` does): before starting a span, the adapter chooses its
    ids for the calling thread, and the provider takes them. Spans started by
    anything else get random ids, as with the SDK's default generator.
    """

    def __init__(self) -> None:
        self._local = threading.local()
        self._random = RandomIdGenerator()

    def choose(self, trace_id: int, span_id: int) -> None:
        """The ids of the next span this thread starts."""
        self._local.ids = (trace_id, span_id)

    def generate_trace_id(self) -> int:
        ids: tuple[int, int] | None = getattr(self._local, "ids", None)
        return ids[0] if ids else self._random.generate_trace_id()

    def generate_span_id(self) -> int:
        ids: tuple[int, int] | None = getattr(self._local, "ids", None)
        if ids is None:
            return self._random.generate_span_id()
        self._local.ids = None
        return ids[1]

    def is_trace_id_random(self) -> bool:
        return True  # operation ids are random 128-bit values
