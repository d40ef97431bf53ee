"""A job's trace as an HTML waterfall: the rows ``sparkrun trace show`` draws, bars in SVG.

The spans come from the daemon's local trace store (where its workers export
when no OTLP endpoint is set). Bars are SVG geometry, not inline styles, so
the page's strict policy holds. Links open the same trace by operation id in
Jaeger or Tempo when their URLs are configured (``console.jaeger_url``,
``console.tempo_url``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from sparkrun.daemon.console.markup import e, table

__all__ = ["trace_body", "trace_links"]

_BAR = 300  # SVG width of the timeline column


def trace_links(operation_id: str, urls: Mapping[str, str]) -> str:
    """Links to the trace in the configured backends (Jaeger's trace page, Grafana's Tempo search)."""
    tempo_query = quote(f'{{"queries":[{{"query":"{operation_id}"}}]}}')
    places = {
        "Jaeger": lambda base: f"{base.rstrip('/')}/trace/{operation_id}",
        "Tempo": lambda base: f"{base.rstrip('/')}/explore?left={tempo_query}",
    }
    found = [
        f'<a href="{e(places[name](url))}" rel="noreferrer">Open in {e(name)}</a>'
        for name, url in urls.items()
        if name in places and url
    ]
    return f'<p class="links">{" · ".join(found)}</p>' if found else ""


def trace_body(state_dir: Path, operation_id: str, urls: Mapping[str, str]) -> str:
    from otel.local_store import TraceStore
    from otel.span_tree import format_duration, waterfall_rows

    links = trace_links(operation_id, urls)
    spans = TraceStore.in_state_dir(state_dir).spans(operation_id)
    if not spans:
        return (
            f"<p>No span of trace <code>{e(operation_id)}</code> is in this daemon's local store "
            "(its workers export elsewhere when an OTLP endpoint is set).</p>" + links
        )
    rows = []
    for row in waterfall_rows(spans):
        x = round(row.start_fraction * _BAR, 1)
        width = max(1.0, round(row.length_fraction * _BAR, 1))
        offset, duration = format_duration(row.offset_seconds), format_duration(row.span.duration_seconds)
        bar = (
            f'<svg class="bar" width="{_BAR}" height="12" role="img" aria-label="from +{e(offset)} for {e(duration)}">'
            f'<rect x="{x}" y="1" width="{width}" height="10" class="status-{e(row.status)}"></rect></svg>'
        )
        name = f'<td class="name depth-{min(row.depth, 8)}">{e(row.span.name)}</td>'
        rows.append(
            f'<tr class="span status-{e(row.status)}">{name}<td>{e(row.host)}</td><td>{e(row.status)}</td>'
            f"<td>{e(duration)}</td><td>+{e(offset)}</td><td>{bar}</td><td>{e(row.reports)}</td>"
            f"<td>{e(row.last_message)}</td></tr>"
        )
    headers = ["span", "host", "status", "duration", "start", "timeline", "reports", "last message"]
    return f"<p>Trace id <code>{e(operation_id)}</code></p>{links}" + table(headers, rows, body_id="spans")
