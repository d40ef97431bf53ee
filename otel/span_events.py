"""Recording a report as a span event, with or without the SDK's attribute cleaning.

The SDK's ``Span.add_event`` copies the attributes into a ``BoundedAttributes``,
checking every key and value on the way and applying the span limits. For
the six attributes of a typical report that costs about 4 us, the largest
single cost of a report under the adapter, and a report needs none of it
when the limits are the SDK's defaults: the envelope contract already
guarantees non-empty string keys and plain scalar values, a report has at
most :data:`MAX_REPORT_ATTRIBUTES` attributes, and no value-length limit is
configured. In that case the SDK span's own ``Event`` is appended directly,
holding a read-only view of the attributes (the SDK's are immutable too). In
every other case (an API without the SDK, a length limit or a lower count
limit, a value that is not a plain scalar, say in a replayed file) the public
``add_event`` is used, so the result is always what the SDK would record.

The direct path relies on the SDK span's ``_add_event`` (it appends the event
under the span's lock and refuses ended spans, as ``add_event`` does). If a
future SDK drops it, :func:`direct_events_possible` says no and nothing else
changes; ``tests/unit/otel/test_span_events.py`` pins the equivalence.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace import Span as SdkSpan
from opentelemetry.trace import Span, TracerProvider

from sparkrun.core.envelope import MAX_METRICS

__all__ = ["MAX_REPORT_ATTRIBUTES", "add_event", "direct_events_possible"]

#: ``message``, the six report fields and every metric.
MAX_REPORT_ATTRIBUTES = 7 + MAX_METRICS
_SCALARS = frozenset({str, int, float, bool})
_append_event = getattr(SdkSpan, "_add_event", None)


def direct_events_possible(tracer_provider: TracerProvider) -> bool:
    """Whether the provider's span limits leave a report's attributes unchanged.

    The SDK keeps its limits privately (as :func:`otel.span_mapper` reads the
    event limit); anything unexpected means no.
    """
    limits = getattr(tracer_provider, "_span_limits", None)
    if _append_event is None or limits is None:
        return False
    max_count = getattr(limits, "max_event_attributes", 0)
    no_length_limit = getattr(limits, "max_attribute_length", 0) is None
    return no_length_limit and (
        max_count is None or (isinstance(max_count, int) and max_count >= MAX_REPORT_ATTRIBUTES)
    )


def add_event(span: Span, name: str, attributes: dict[str, Any], timestamp: int, *, direct: bool) -> None:
    """Add the event ``name`` to ``span``; ``direct`` comes from :func:`direct_events_possible`.

    ``attributes`` must not be used by the caller afterwards (the event keeps it).
    """
    if direct and isinstance(span, SdkSpan) and len(attributes) <= MAX_REPORT_ATTRIBUTES:
        for value in attributes.values():
            if type(value) not in _SCALARS:
                break
        else:
            _append_event(span, Event(name, MappingProxyType(attributes), timestamp))  # type: ignore[misc]
            return
    span.add_event(name, attributes, timestamp)
