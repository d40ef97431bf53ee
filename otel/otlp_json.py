"""OTLP/JSON encoding of finished spans, and reading it back.

This is the line format of the OpenTelemetry Collector's file exporter and
OTLP JSON file receiver: one ``TracesData`` object per line, lowerCamelCase
keys, ids as lowercase hex, 64-bit integers as decimal strings.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, StatusCode

__all__ = ["attributes_of", "context_of", "encode_spans"]

_STATUS_CODES = {StatusCode.UNSET: 0, StatusCode.OK: 1, StatusCode.ERROR: 2}


def _any_value(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [_any_value(item) for item in value]}}
    return {"stringValue": str(value)}


def _key_values(attributes: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return [{"key": key, "value": _any_value(value)} for key, value in (attributes or {}).items()]


def _decode_value(value: Mapping[str, Any]) -> Any:
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        return int(value["intValue"])
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [_decode_value(item) for item in value["arrayValue"].get("values", [])]
    return None


def attributes_of(key_values: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    """Decode an OTLP/JSON attribute list into a plain dict."""
    return {item["key"]: _decode_value(item.get("value", {})) for item in key_values or ()}


def context_of(span: ReadableSpan) -> SpanContext:
    """The span's context: every span the SDK ends has one; a hand-made ``ReadableSpan`` may not."""
    context = span.get_span_context()
    if context is None:
        raise ValueError(f"span {span.name!r} has no span context, so it belongs to no trace")
    return context


def _span(span: ReadableSpan) -> dict[str, Any]:
    context = context_of(span)
    encoded: dict[str, Any] = {
        "traceId": f"{context.trace_id:032x}",
        "spanId": f"{context.span_id:016x}",
        "name": span.name,
        "kind": int(span.kind.value) + 1,
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": _key_values(span.attributes),
        "events": [
            {"timeUnixNano": str(event.timestamp), "name": event.name, "attributes": _key_values(event.attributes)}
            for event in span.events
        ],
        "status": {"code": _STATUS_CODES[span.status.status_code]},
    }
    if span.parent is not None:
        encoded["parentSpanId"] = f"{span.parent.span_id:016x}"
    if span.status.description:
        encoded["status"]["message"] = span.status.description
    dropped = span.dropped_events
    if dropped:
        encoded["droppedEventsCount"] = dropped
    return encoded


def encode_spans(spans: Iterable[ReadableSpan]) -> dict[str, Any]:
    """One ``TracesData`` object for ``spans``, grouped by resource and scope."""
    grouped: dict[Any, dict[Any, list[ReadableSpan]]] = defaultdict(lambda: defaultdict(list))
    for span in spans:
        grouped[span.resource][span.instrumentation_scope].append(span)
    resource_spans = []
    for resource, scopes in grouped.items():
        scope_spans = []
        for scope, members in scopes.items():
            scope_json = {"name": scope.name, "version": scope.version or ""} if scope else {}
            scope_spans.append({"scope": scope_json, "spans": [_span(span) for span in members]})
        resource_json = {"attributes": _key_values(resource.attributes if resource else None)}
        resource_spans.append({"resource": resource_json, "scopeSpans": scope_spans})
    return {"resourceSpans": resource_spans}
