"""Building the console's HTML: every value escaped, every page in one shell with the same headers.

Nothing from an event, a job or a log is ever inserted unescaped: a message
``<img src=x onerror=alert(1)>`` is shown as those characters. The headers
forbid inline script and framing, and keep the pages out of caches and
referrers.
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from typing import Any

from starlette.responses import HTMLResponse

__all__ = ["HEADERS", "csrf_field", "e", "page", "table"]

HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_NAV = (("/ui/", "Jobs"), ("/ui/deployments", "Deployments"))


def e(value: Any) -> str:
    """A value as HTML text (quotes escaped too, so it is safe in attributes)."""
    return escape("" if value is None else str(value), quote=True)


def csrf_field(csrf: str) -> str:
    return f'<input type="hidden" name="csrf" value="{e(csrf)}">'


def table(headers: Iterable[str], rows: Iterable[str], *, body_id: str = "", caption: str = "") -> str:
    head = "".join(f'<th scope="col">{e(h)}</th>' for h in headers)
    ident = f' id="{e(body_id)}"' if body_id else ""
    cap = f"<caption>{e(caption)}</caption>" if caption else ""
    body = "".join(rows)
    return f'<div class="scroll"><table>{cap}<thead><tr>{head}</tr></thead><tbody{ident}>{body}</tbody></table></div>'


def page(
    title: str, body: str, *, csrf: str | None = None, status: int = 200, data: dict[str, str] | None = None
) -> HTMLResponse:
    """A whole page: navigation (and a sign-out form when signed in), the body, the script."""
    nav = "".join(f'<a href="{href}">{e(label)}</a>' for href, label in _NAV) if csrf else ""
    out = (
        f'<form method="post" action="/ui/sign-out" class="inline">{csrf_field(csrf)}'
        '<button type="submit">Sign out</button></form>'
        if csrf
        else ""
    )
    attributes = "".join(f' data-{e(key)}="{e(value)}"' for key, value in (data or {}).items())
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} · sparkrun</title>"
        '<link rel="icon" href="/ui/static/favicon.svg" type="image/svg+xml">'
        '<link rel="stylesheet" href="/ui/static/console.css">'
        '<script src="/ui/static/console.js" defer></script></head>'
        f"<body{attributes}><header><strong>sparkrun</strong><nav>{nav}</nav>{out}</header>"
        f'<main id="main"><h1>{e(title)}</h1>{body}</main></body></html>'
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)
