"""The optional framework parser interface of the benchmark progress contract.

A runner that has a parser for a framework creates one per attempt, reports
what :meth:`ProgressParser.start` returns, feeds it every (decoded, redacted)
stderr line of the framework, reports each non-``None`` answer, and reports
what :meth:`ProgressParser.finish` returns. Each answer is a :data:`Fields`:
the keyword arguments of one feedback report, ready for
``reporter.report(**fields)``.

What every parser promises:

- it never raises on what the framework wrote, and never reads a path, file
  or URL named in it;
- each answer passes envelope validation: text is printable and within the
  envelope's limits, numbers are finite, counters are nonnegative, and
  ``metrics`` has at most :data:`MAX_PARSER_METRICS` entries, so the runner
  can add its ``benchmark_id``, ``task_index`` and ``attempt_id`` (names a
  parser never uses) without exceeding the envelope's 32;
- totals are ``exact`` only when the framework announced them, never
  ``upper_bound``;
- its memory does not grow with the number of lines (see each parser for the
  one bounded set it may keep).
"""

from __future__ import annotations

from typing import Any, Protocol, Required, TypedDict

from sparkrun.core.envelope import MAX_METRICS
from sparkrun.core.events import Level, Status, TotalKind

__all__ = ["MAX_LINE_CHARS", "MAX_PARSER_METRICS", "Fields", "MetricValue", "ProgressParser"]

#: The longest line a parser reads; a longer one is ignored (and warned about).
MAX_LINE_CHARS = 65_536
#: Metrics a parser's answer may hold: the envelope's 32 less the runner's three ids and one spare.
MAX_PARSER_METRICS = MAX_METRICS - 4

MetricValue = str | int | float | bool | None


class Fields(TypedDict, total=False):
    """The keyword arguments of one feedback report (``message`` always present)."""

    message: Required[str]
    level: Level
    stage: str
    status: Status
    current: int | float
    total: int | float
    total_kind: TotalKind
    unit: str
    metrics: dict[str, MetricValue]


class ProgressParser(Protocol):
    """Reads one attempt of a framework: start, every stderr line, finish."""

    #: The feedback source of the attempt's reports, ``benchmark.<framework>``.
    source: str

    def start(self) -> Fields:
        """The attempt's first report, before the framework wrote anything."""
        ...

    def feed(self, line: str) -> Fields | None:
        """A report for one stderr line, or ``None`` when the line changes nothing worth reporting."""
        ...

    def finish(self, result: Any, *, success: bool) -> Fields:
        """The attempt's terminal report, reconciled with ``result`` (the accepted result, or ``None``)."""
        ...
