"""The span tree of one trace as a terminal waterfall (the tree itself: :mod:`otel.span_tree`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkrun.cli.tables import fit

if TYPE_CHECKING:
    from otel.local_store import StoredSpan

__all__ = ["render_waterfall"]

_BAR_WIDTH = 16  # with the start column, the last message still fits in 120 columns


def render_waterfall(spans: list[StoredSpan], *, width: int = 140) -> str:
    """One line per span: tree, host, status, duration, start, timeline bar, reports, last message.

    ``start`` is the span's offset from the trace's first start, so imported
    spans show where their own clock put them. The report column is
    ``shown+coalesced`` span events.
    """
    from otel.span_tree import format_duration, waterfall_rows

    header = (
        f"{'span':<38} {'host':<12} {'status':<10} {'duration':>8} {'start':>8}  "
        f"{'timeline':<{_BAR_WIDTH}} {'reports':>9}"
    )
    lines = [fit(header + "  last", width)]
    for row in waterfall_rows(spans):
        left = int(row.start_fraction * _BAR_WIDTH)
        length = max(1, int(row.length_fraction * _BAR_WIDTH))
        bar = (" " * left + "█" * length)[:_BAR_WIDTH]
        line = (
            f"{fit(row.branch + row.span.name, 38):<38} {fit(row.host, 12):<12} {row.status:<10} "
            f"{format_duration(row.span.duration_seconds):>8} {'+' + format_duration(row.offset_seconds):>8}  "
            f"{bar:<{_BAR_WIDTH}} {row.reports:>9}  {row.last_message}"
        )
        lines.append(fit(line, width))
    return "\n".join(lines)
