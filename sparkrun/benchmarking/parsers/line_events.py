"""Turning a framework's stderr lines into event objects, and saying when one is ignored.

Frameworks interleave JSON event lines with ordinary text (a traceback, a
library's warning). A line whose first visible character is ``{`` or ``[`` is
meant as an event; any other line is ordinary text and is skipped silently.
An event line that is too long, not JSON, not an object, or lacks its type
field is ignored, counted, and reported as a warning within a
:class:`NoticeBudget`, so a flood of bad lines yields a bounded number of
warnings.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import isfinite
from typing import Any

from sparkrun.benchmarking.foreign_input import ForeignJSONError, loads, printable
from sparkrun.benchmarking.parsers.base import MAX_LINE_CHARS
from sparkrun.core.envelope import INT64_MAX

__all__ = [
    "INDIVIDUAL_NOTICES",
    "BadLine",
    "LineDecoder",
    "NoticeBudget",
    "count",
    "number",
    "text",
]

#: The first this-many notices of a kind are each reported; after that, only the 10th, 100th, 1000th, ...
INDIVIDUAL_NOTICES = 5


class NoticeBudget:
    """Decides which of a run of similar notices get reported.

    The first :data:`INDIVIDUAL_NOTICES` are reported, then the one whose
    number is a power of ten (10, 100, 1000, ...): ``n`` notices produce at most
    ``5 + log10(n)`` reports, and the count keeps growing in them.
    """

    __slots__ = ("seen",)

    def __init__(self) -> None:
        self.seen = 0

    def admit(self) -> bool:
        """Count one notice; whether it should be reported."""
        self.seen += 1
        seen = self.seen
        if seen <= INDIVIDUAL_NOTICES:
            return True
        while seen % 10 == 0:
            seen //= 10
        return seen == 1


@dataclass(frozen=True, slots=True)
class BadLine:
    """Why an event line was ignored (printable, short)."""

    problem: str


class LineDecoder:
    """Decodes event lines whose type is named by ``type_key`` (``event``, ``type``)."""

    __slots__ = ("lines", "type_key")

    def __init__(self, type_key: str) -> None:
        self.type_key = type_key
        self.lines = 0

    def decode(self, line: object) -> dict[str, Any] | BadLine | None:
        """The event object of ``line``, why it is a bad event line, or ``None`` for ordinary text."""
        self.lines += 1
        if not isinstance(line, str):
            return BadLine(f"line {self.lines} is a {printable(type(line).__name__, 40)}, not text")
        line = str.__str__(line).rstrip("\r\n")
        if len(line) > MAX_LINE_CHARS:
            return BadLine(f"line {self.lines} is {len(line)} characters long (limit {MAX_LINE_CHARS})")
        visible = line.lstrip()
        if not visible or visible[0] not in "{[":
            return None
        try:
            event = loads(visible)
        except ForeignJSONError as exc:
            return BadLine(f"line {self.lines}: {exc}")
        if type(event) is not dict:
            return BadLine(f"line {self.lines} is a JSON {_json_kind(event)}, not an object")
        kind = event.get(self.type_key)
        if type(kind) is not str:
            return BadLine(f"line {self.lines} has no text {self.type_key!r} field")
        return event


def _json_kind(value: object) -> str:
    return "array" if isinstance(value, list) else "value"


def count(value: object, limit: int = INT64_MAX) -> int | None:
    """``value`` if it is an integer from 0 to ``limit`` (booleans are not), else ``None``."""
    return value if type(value) is int and 0 <= value <= limit else None


def number(value: object, limit: float) -> float | None:
    """``value`` as a float if it is a finite number from 0 to ``limit`` (booleans are not), else ``None``."""
    if type(value) is int and 0 <= value <= limit:
        return float(value)
    if type(value) is float and isfinite(value) and 0.0 <= value <= limit:
        return value
    return None


def text(value: object, limit: int) -> str | None:
    """``value`` made printable and cut to ``limit`` characters if it is a non-empty string, else ``None``."""
    return printable(value, limit) if type(value) is str and value else None
