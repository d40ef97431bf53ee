"""One-line rendering of any native event, for terminals and plain logs."""

from __future__ import annotations

from typing import Any

__all__ = ["describe_event"]

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
        who = event.get("source") or event.get("kind") or "-"
        return f"{level:<8} {who}: {event.get('message', '')}"
    who = event["source"] + (f"@{event['host']}" if "host" in event else "")
    where = "/".join(part for part in (event.get("stage"), event.get("status")) if part)
    return f"{level:<8} {who:<18} {where:<19} {event['message']}{_counter(event)}"
