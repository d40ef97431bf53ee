"""JSON Schemas of the native event stream, for consumers in any language."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

__all__ = ["SCHEMA_NAMES", "load_schema"]

#: Event type -> schema file shipped in this package.
SCHEMA_NAMES = {
    "feedback": "feedback-event.schema.json",
    "log": "log-event.schema.json",
    "progress": "progress-event.schema.json",
    "benchmark": "benchmark-event.schema.json",
    "setup": "setup-event.schema.json",
}


def load_schema(event_type: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one event type of the native stream."""
    try:
        name = SCHEMA_NAMES[event_type]
    except KeyError:
        raise ValueError(f"event type is {event_type!r}; expected one of {', '.join(SCHEMA_NAMES)}") from None
    schema: dict[str, Any] = json.loads(resources.files(__name__).joinpath(name).read_text(encoding="utf-8"))
    return schema
