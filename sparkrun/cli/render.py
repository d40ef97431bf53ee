"""One-line terminal rendering of native events, for live output."""

from __future__ import annotations

from typing import IO, Any

__all__ = ["EventPrinter", "describe_event"]

_BOUND = {"exact": "/", "upper_bound": "/<=", "unknown": ""}


def _counter(event: dict[str, Any]) -> str:
    if "current" not in event:
        return ""
    unit = f" {event['unit']}" if "unit" in event else ""
    total = f"{_BOUND[event['total_kind']]}{event['total']:,}" if "total" in event else ""
    return f" [{event['current']:,}{total}{unit}]"


def describe_event(event: dict[str, Any]) -> str:
    """A compact, human-readable line for any event; unknown types show their message."""
    level = event.get("level", event.get("type", "event"))
    if event.get("type") != "feedback":
        return f"{level:<8} {event.get('source', '-')}: {event.get('message', '')}"
    who = event["source"] + (f"@{event['host']}" if "host" in event else "")
    where = "/".join(part for part in (event.get("stage"), event.get("status")) if part)
    return f"{level:<8} {who:<18} {where:<19} {event['message']}{_counter(event)}"


class EventPrinter:
    """A subscriber that prints each event as one line (human or JSON)."""

    def __init__(self, stream: IO[str], *, as_json: bool = False) -> None:
        self._stream = stream
        self._as_json = as_json

    def __call__(self, event: dict[str, Any]) -> None:
        if self._as_json:
            import json

            line = json.dumps(event)
        else:
            line = describe_event(event)
        self._stream.write(line + "\n")
        self._stream.flush()
