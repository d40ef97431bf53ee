"""Plain-text tables that fit the terminal: a header row, aligned columns, the widest one cut with "…"."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

__all__ = ["fit", "render_table", "terminal_width"]

ELLIPSIS = "…"


def terminal_width(default: int = 120) -> int:
    """The terminal's width in columns (``COLUMNS`` wins; ``default`` off a terminal)."""
    return max(20, shutil.get_terminal_size((default, 24)).columns)


def fit(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters, ending in an ellipsis when cut."""
    return text if len(text) <= width else text[: max(0, width - 1)] + ELLIPSIS


def render_table(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[int] = (),
    flexible: int = -1,
    width: int | None = None,
) -> str:
    """Rows under a header, columns two spaces apart, within ``width`` (the terminal's by default).

    Columns listed in ``right`` are right-aligned. When the table is too wide,
    the ``flexible`` column (the last by default) is cut first, with an
    ellipsis; a line that still does not fit is cut at the edge.
    """
    width = terminal_width() if width is None else width
    count = len(header)
    flexible %= count
    widths = [max([len(header[i]), *(len(row[i]) for row in rows)]) for i in range(count)]
    fixed = sum(w for i, w in enumerate(widths) if i != flexible) + 2 * (count - 1)
    widths[flexible] = max(len(header[flexible]), min(widths[flexible], width - fixed))

    def line(cells: Sequence[str]) -> str:
        parts = []
        for index, cell in enumerate(cells):
            text = fit(cell, widths[index])
            last = index == count - 1
            parts.append(text.rjust(widths[index]) if index in right else (text if last else text.ljust(widths[index])))
        return fit("  ".join(parts).rstrip(), width)

    return "\n".join([line(header), *(line(row) for row in rows)])
