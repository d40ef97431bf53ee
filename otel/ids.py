"""The id generator that gives sparkrun's spans the ids derived from sparkrun's own ids.

The derivation itself (trace id = operation id, span ids hashed from
operation and activity ids) is :mod:`sparkrun.core.trace_ids`, re-exported
here for the adapter's modules.
"""

from __future__ import annotations

import threading

from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator

from sparkrun.core.trace_ids import activity_span_id, phase_span_id, root_span_id, trace_id_of

__all__ = ["OperationIdGenerator", "activity_span_id", "phase_span_id", "root_span_id", "trace_id_of"]


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
