"""A job's events as the console shows them: one row per activity and host, and a readable event log.

The same reduction runs in the browser (``console.js``) on live events; this
one renders the page as it is when loaded, so it reads right with
JavaScript off. A counter is a bar only for an exact total, "up to N" for an
upper bound, and a spinner when the total is unknown; warnings and errors
carry a word, never a colour alone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sparkrun.daemon.console.markup import e

__all__ = ["Activity", "activities", "activity_row", "event_line"]


@dataclass
class Activity:
    key: str
    source: str = ""
    host: str = ""
    stage: str = ""
    status: str = ""
    level: str = "info"
    message: str = ""
    counter: dict[str, Any] = field(default_factory=dict)


def _number(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else e(value)


def progress_cell(counter: dict[str, Any]) -> str:
    if not counter:
        return ""
    current, total, unit = counter.get("current"), counter.get("total"), e(counter.get("unit") or "")
    kind = counter.get("total_kind")
    if kind == "exact" and isinstance(total, (int, float)) and total > 0:
        return (
            f'<progress value="{e(current)}" max="{e(total)}"></progress> '
            f"<span>{_number(current)} / {_number(total)} {unit}</span>"
        )
    if kind == "upper_bound" and total is not None:
        return f"<span>{_number(current)} of up to {_number(total)} {unit}</span>"
    return f'<span class="spinner" role="img" aria-label="working"></span> <span>{_number(current)} {unit}</span>'


def activity_row(activity: Activity) -> str:
    level = activity.level if activity.level in ("warning", "error") else ""
    marked = f'<strong class="level">{level.upper()}</strong> ' if level else ""
    return (
        f'<tr data-key="{e(activity.key)}" class="{level}"><td>{e(activity.source)}</td><td>{e(activity.host)}</td>'
        f"<td>{e(activity.stage)}</td><td>{e(activity.status)}</td><td>{progress_cell(activity.counter)}</td>"
        f"<td>{marked}{e(activity.message)}</td></tr>"
    )


def activities(rows: list[tuple[int, str]]) -> dict[str, Activity]:
    """The latest state of every activity (feedback) and launch phase (progress) in ``rows``."""
    found: dict[str, Activity] = {}
    for _, text in rows:
        event = json.loads(text)
        kind = event.get("type")
        if kind == "feedback":
            key = f"{event.get('activity_id')}"
            activity = found.setdefault(key, Activity(key))
            activity.source, activity.host = event.get("source", ""), event.get("host") or ""
            activity.stage = event.get("stage") or activity.stage
            activity.status = event.get("status") or activity.status
            activity.level, activity.message = event.get("level", "info"), event.get("message", "")
            if "current" in event:
                activity.counter = {k: event.get(k) for k in ("current", "total", "total_kind", "unit")}
        elif kind == "progress":
            key = f"phase:{event.get('slug')}"
            activity = found.setdefault(key, Activity(key, source="launch", stage=str(event.get("slug", ""))))
            activity.status, activity.message = event.get("status", ""), event.get("message", "")
    return found


def event_line(seq: int, text: str) -> str:
    event = json.loads(text)
    level = event.get("level", "info")
    marked = f"<strong>{e(level.upper())}</strong> " if level in ("warning", "error") else ""
    where = " ".join(e(event.get(k)) for k in ("source", "host", "stage") if event.get(k))
    message = event.get("message") or event.get("kind") or event.get("type")
    return f'<li data-seq="{seq}" class="{e(level)}">{marked}<span class="where">{where}</span> {e(message)}</li>'
