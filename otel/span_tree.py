"""The span tree of one trace, in display order: what the terminal waterfall and the web console draw.

Each row is a span with its depth, its place on the trace's timeline (as
fractions of the whole, so any width can draw it) and the figures shown
beside it. ``start`` offsets come from each span's own start, so spans
imported from another clock show where that clock put them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only a type here: the terminal's duration formatting must not load the SDK
    from otel.local_store import StoredSpan

__all__ = ["WaterfallRow", "format_duration", "span_tree", "waterfall_rows"]


@dataclass(frozen=True)
class WaterfallRow:
    span: StoredSpan
    depth: int
    #: Tree drawing before the name (``│  ├─ ``), for text renderings.
    branch: str
    offset_seconds: float
    start_fraction: float
    length_fraction: float
    status: str
    reports: str
    last_message: str

    @property
    def host(self) -> str:
        return str(self.span.attributes.get("host.name", ""))


def _children_of(spans: list[StoredSpan]) -> tuple[list[StoredSpan], dict[str, list[StoredSpan]]]:
    known = {span.span_id for span in spans}
    roots: list[StoredSpan] = []
    children: dict[str, list[StoredSpan]] = {}
    for span in spans:
        if span.parent_span_id is None or span.parent_span_id not in known:
            roots.append(span)
        else:
            children.setdefault(span.parent_span_id, []).append(span)
    return roots, children


def _kids(children: dict[str, list[StoredSpan]], span: StoredSpan) -> list[StoredSpan]:
    return sorted(children.get(span.span_id, []), key=lambda s: (s.start_ns, s.span_id))


def _last_message(span: StoredSpan) -> str:
    message = span.attributes.get("sparkrun.last_message")
    if message:
        return str(message)
    for event in reversed(span.events):
        if "message" in event["attributes"]:
            return str(event["attributes"]["message"])
    return span.status_message


def _report_count(span: StoredSpan) -> str:
    shown = len(span.events)
    coalesced = int(span.attributes.get("sparkrun.coalesced_events", 0) or 0)
    return f"{shown}+{coalesced}" if coalesced else str(shown)


def _status(span: StoredSpan) -> str:
    if span.attributes.get("sparkrun.unfinished"):
        return "unfinished"
    if span.attributes.get("sparkrun.status") == "skipped":
        return "skipped"
    return span.status


def format_duration(seconds: float) -> str:
    """A duration as the waterfall and ``trace list`` show it: ms below a second, then s, then minutes."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.2f}s"
    return f"{seconds / 60:.1f}m"


def waterfall_rows(spans: list[StoredSpan]) -> list[WaterfallRow]:
    """Every span, parents before their children, children by start."""
    if not spans:
        return []
    roots, children = _children_of(spans)
    start = min(span.start_ns for span in spans)
    total = max(max(span.end_ns for span in spans) - start, 1)
    rows: list[WaterfallRow] = []

    def walk(span: StoredSpan, prefix: str, last: bool, depth: int) -> None:
        rows.append(
            WaterfallRow(
                span,
                depth,
                prefix + ("" if depth == 0 else ("└─ " if last else "├─ ")),
                (span.start_ns - start) / 1e9,
                (span.start_ns - start) / total,
                max(0, span.end_ns - span.start_ns) / total,
                _status(span),
                _report_count(span),
                _last_message(span),
            )
        )
        kids = _kids(children, span)
        extension = "" if depth == 0 else ("   " if last else "│  ")
        for index, kid in enumerate(kids):
            walk(kid, prefix + extension, index == len(kids) - 1, depth + 1)

    for root in roots:
        walk(root, "", True, 0)
    return rows


def span_tree(spans: list[StoredSpan]) -> list[dict[str, Any]]:
    """The same tree as nested dicts, for ``--json``."""
    roots, children = _children_of(spans)

    def node(span: StoredSpan) -> dict[str, Any]:
        return {
            "name": span.name,
            "span_id": span.span_id,
            "parent_span_id": span.parent_span_id,
            "host": span.attributes.get("host.name"),
            "start_unix_nano": span.start_ns,
            "duration_seconds": span.duration_seconds,
            "status": _status(span),
            "status_message": span.status_message,
            "events": len(span.events),
            "coalesced_events": int(span.attributes.get("sparkrun.coalesced_events", 0) or 0),
            "last_message": _last_message(span),
            "attributes": span.attributes,
            "children": [node(kid) for kid in _kids(children, span)],
        }

    return [node(root) for root in roots]
