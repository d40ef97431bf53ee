"""One-line rendering of any native event, for terminals and plain logs."""

from __future__ import annotations

from typing import TypeGuard

from sparkrun.core.events import Event, FeedbackEvent, ProgressEvent

__all__ = ["describe_event", "is_feedback", "is_progress"]

_BOUND = {"exact": "/", "upper_bound": "/<=", "unknown": ""}


def is_feedback(event: Event) -> TypeGuard[FeedbackEvent]:
    """Whether ``event`` is a feedback envelope (read with ``get``: an event of a later kind may lack a type)."""
    return event.get("type") == "feedback"


def is_progress(event: Event) -> TypeGuard[ProgressEvent]:
    """Whether ``event`` is a launch phase event."""
    return event.get("type") == "progress"


def _counter(event: FeedbackEvent) -> str:
    if "current" not in event:
        return ""
    unit = f" {event['unit']}" if "unit" in event else ""
    total = f"{_BOUND[event['total_kind']]}{event['total']:,}" if "total" in event else ""
    return f" [{event['current']:,}{total}{unit}]"


def describe_event(event: Event) -> str:
    """A compact, human-readable line for any event; unknown types show their message."""
    level = event.get("level", event.get("type", "event"))
    if not is_feedback(event):
        who = event.get("source") or event.get("kind") or "-"
        return f"{level:<8} {who}: {event.get('message', '')}"
    who = event["source"] + (f"@{event['host']}" if "host" in event else "")
    where = "/".join(part for part in (event.get("stage"), event.get("status")) if part)
    return f"{level:<8} {who:<18} {where:<19} {event['message']}{_counter(event)}"
