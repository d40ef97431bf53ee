"""The span tree of one trace as a terminal waterfall, or as JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sparkrun.cli.tables import fit

if TYPE_CHECKING:
    from otel.local_store import StoredSpan

__all__ = ["format_duration", "render_waterfall", "span_tree"]

_BAR_WIDTH = 16  # with the start column, the last message still fits in 120 columns


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


def format_duration(seconds: float) -> str:
    """A duration as the waterfall and ``trace list`` show it: ms below a second, then s, then minutes."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    if seconds < 120:
        return f"{seconds:.2f}s"
    return f"{seconds / 60:.1f}m"


def _status(span: StoredSpan) -> str:
    if span.attributes.get("sparkrun.unfinished"):
        return "unfinished"
    if span.attributes.get("sparkrun.status") == "skipped":
        return "skipped"
    return span.status


def render_waterfall(spans: list[StoredSpan], *, width: int = 140) -> str:
    """One line per span: tree, host, status, duration, start, timeline bar, reports, last message.

    ``start`` is the span's offset from the trace's first start, so imported
    spans show where their own clock put them. The report column is
    ``shown+coalesced`` span events.
    """
    roots, children = _children_of(spans)
    start = min(span.start_ns for span in spans)
    end = max(span.end_ns for span in spans)
    total = max(end - start, 1)
    header = (
        f"{'span':<38} {'host':<12} {'status':<10} {'duration':>8} {'start':>8}  "
        f"{'timeline':<{_BAR_WIDTH}} {'reports':>9}"
    )
    lines = [fit(header + "  last", width)]

    def walk(span: StoredSpan, prefix: str, last: bool, depth: int) -> None:
        branch = "" if depth == 0 else ("└─ " if last else "├─ ")
        name = fit(prefix + branch + span.name, 38)
        left = int((span.start_ns - start) / total * _BAR_WIDTH)
        length = max(1, int((span.end_ns - span.start_ns) / total * _BAR_WIDTH))
        bar = (" " * left + "█" * length)[:_BAR_WIDTH]
        host = fit(str(span.attributes.get("host.name", "")), 12)
        line = (
            f"{name:<38} {host:<12} {_status(span):<10} {format_duration(span.duration_seconds):>8} "
            f"{'+' + format_duration((span.start_ns - start) / 1e9):>8}  "
            f"{bar:<{_BAR_WIDTH}} {_report_count(span):>9}  {_last_message(span)}"
        )
        lines.append(fit(line, width))
        kids = sorted(children.get(span.span_id, []), key=lambda s: (s.start_ns, s.span_id))
        extension = "" if depth == 0 else ("   " if last else "│  ")
        for index, kid in enumerate(kids):
            walk(kid, prefix + extension, index == len(kids) - 1, depth + 1)

    for root in roots:
        walk(root, "", True, 0)
    return "\n".join(lines)


def span_tree(spans: list[StoredSpan]) -> list[dict[str, Any]]:
    """The same tree as nested dicts, for ``--json``."""
    roots, children = _children_of(spans)

    def node(span: StoredSpan) -> dict[str, Any]:
        kids = sorted(children.get(span.span_id, []), key=lambda s: (s.start_ns, s.span_id))
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
            "children": [node(kid) for kid in kids],
        }

    return [node(root) for root in roots]
