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

import logging
from collections.abc import Callable
from dataclasses import dataclass
from math import isfinite
from typing import Any, TypeVar

from sparkrun.benchmarking.foreign_input import ForeignJSONError, loads, printable
from sparkrun.benchmarking.parsers.base import MAX_LINE_CHARS, Fields
from sparkrun.benchmarking.results.result_files import ResultFileError
from sparkrun.core.envelope import INT64_MAX
from sparkrun.core.events import Level
from sparkrun.core.short_repr import short_repr

__all__ = [
    "INDIVIDUAL_NOTICES",
    "BadLine",
    "EventLineParser",
    "LineDecoder",
    "NoticeBudget",
    "accepted",
    "count",
    "number",
    "text",
]

_log = logging.getLogger(__name__)
_Summary = TypeVar("_Summary")

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


class EventLineParser:
    """What both parsers share: decoding each line, never raising, and the bad-line budget.

    A subclass names its ``tool``, handles decoded events in :meth:`_event`
    and builds its reports in :meth:`_report`.
    """

    tool = "framework"

    def __init__(self, type_key: str) -> None:
        self._decoder = LineDecoder(type_key)
        self._bad_lines = NoticeBudget()

    def feed(self, line: str) -> Fields | None:
        try:
            event = self._decoder.decode(line)
            if event is None:
                return None
            if isinstance(event, BadLine):
                return self._ignore(event.problem)
            return self._event(event)
        except Exception as exc:  # a bug here must not end the benchmark; say what happened
            _log.warning("%s parser failed on line %d: %s", self.tool, self._decoder.lines, type(exc).__name__)
            return self._ignore(f"line {self._decoder.lines} could not be read ({type(exc).__name__})")

    def _event(self, event: dict[str, Any]) -> Fields | None:
        raise NotImplementedError

    def _report(self, message: str, *, level: Level = "progress") -> Fields:
        raise NotImplementedError

    def _ignore(self, problem: str) -> Fields | None:
        """Count a bad line; a warning when the budget admits it."""
        if not self._bad_lines.admit():
            return None
        return self._report(f"Ignored a line from {self.tool}: {problem}", level="warning")

    def _invalid(self, event: dict[str, Any], key: str, type_key: str) -> Fields | None:
        kind = printable(event[type_key], 40)
        return self._ignore(f"line {self._decoder.lines}: {kind} has an invalid {key} {short_repr(event.get(key))}")


def accepted(result: object, kind: type[_Summary], summarize: Callable[[Any], _Summary]) -> tuple[_Summary | None, str]:
    """The summary of a result handed to ``finish``, and why it is unusable ("" when it is not).

    ``result`` is ``None``, an already made summary (``kind``) or the decoded JSON of the result file.
    """
    if result is None:
        return None, ""
    if isinstance(result, kind):
        return result, ""
    try:
        return summarize(result), ""
    except ResultFileError as exc:
        return None, printable(str(exc), 1000)
    except Exception as exc:  # a reader bug must not end the benchmark either
        _log.warning("reading a result failed: %s", type(exc).__name__)
        return None, f"it could not be read ({type(exc).__name__})"
