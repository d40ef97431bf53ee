"""Live scenario counts and outcomes of a tool-eval-bench attempt, from its stderr events.

With ``--json`` (implied by ``--json-file``) tool-eval-bench writes one JSON
object per line on stderr, tagged by ``event``: ``scenario_start``
{scenario_id, title, category, index, total}, ``scenario_result``
{scenario_id, status, points, index, total, duration_seconds} and, once the
result file is written, ``benchmark_complete`` {json_file, final_score}. It
also writes ``error`` {error, message}, ``log`` {level, logger, message} and
``safety_gate_failed``; other events are skipped.

Counters, as the benchmark progress contract specifies: stages
``preparation`` -> ``scenarios`` -> ``finalization``. With one trial the unit
is ``scenarios``, ``current`` the distinct scenarios with a result and
``total`` the total the tool announced (``exact``); once two announcements
disagree, or more distinct scenarios report than were announced, the total is
``unknown`` for the rest of the attempt. With several trials the unit is
``scenario results``, ``current`` the results received, the total unknown.

Outcomes (pass/partial/fail tallies, points) are metrics of every report.
With one trial a scenario reported twice counts once, with its latest
outcome; with several trials every result counts. Memory: one trial keeps the
latest outcome of up to :data:`MAX_SCENARIO_IDS` distinct scenario ids of at
most :data:`MAX_SCENARIO_ID_CHARS` characters (under 30 MB at worst); results
of further ids are counted without telling repeats apart (and said so once).
Several trials keep no ids at all.
"""

from __future__ import annotations

from typing import Any

from sparkrun.benchmarking.foreign_input import printable
from sparkrun.benchmarking.parsers.base import Fields, MetricValue
from sparkrun.benchmarking.parsers.line_events import (
    BadLine,
    EventLineParser,
    NoticeBudget,
    accepted,
    count,
    number,
    text,
)
from sparkrun.benchmarking.results.tool_eval_bench import ToolEvalBenchResult, summarize_tool_eval_bench
from sparkrun.core.events import Level
from sparkrun.core.short_repr import short_repr

__all__ = ["MAX_SCENARIO_IDS", "MAX_SCENARIO_ID_CHARS", "ToolEvalBenchParser"]

#: Distinct scenario ids remembered in a one-trial attempt (the contract's 100,000, with room to spare).
MAX_SCENARIO_IDS = 131_072
#: A longer scenario id makes its line a bad line.
MAX_SCENARIO_ID_CHARS = 128
_MAX_POINTS = 1_000_000
_MAX_TOTAL = 1_000_000_000
_STATUSES = ("pass", "partial", "fail")
_CODES = {status: code for code, status in enumerate(_STATUSES)}
_TOOL = "tool-eval-bench"


class ToolEvalBenchParser(EventLineParser):
    """Reads one tool-eval-bench attempt run with ``trials`` trials (``--trials``)."""

    tool = _TOOL

    def __init__(self, *, trials: int = 1, source: str = "benchmark.tool-eval-bench") -> None:
        if type(trials) is not int or trials < 1:
            raise ValueError(f"trials is {trials!r}; it must be an integer >= 1")
        super().__init__("event")
        self.source = source
        self._trials = trials
        self._tool_notices = NoticeBudget()
        self._stage = "preparation"
        self._announced: int | None = None
        self._total_known = True
        self._outcomes: dict[str, int] = {}  # one trial: scenario id -> points * 3 + status code
        self._unremembered = 0
        self._final: int | None = None  # distinct scenarios of the accepted result
        self._received = 0
        self._tallies = [0, 0, 0]
        self._points = 0
        self._last: dict[str, MetricValue] = {}

    def start(self) -> Fields:
        return self._report(f"{_TOOL} is preparing; waiting for its first scenario")

    def _event(self, event: dict[str, Any]) -> Fields | None:
        kind = event["event"]
        if kind == "scenario_result":
            return self._result(event)
        if kind == "scenario_start":
            return self._started(event)
        if kind == "benchmark_complete":
            return self._complete(event)
        if kind in ("error", "log", "safety_gate_failed"):
            return self._tool_notice(kind, event)
        return None

    def finish(self, result: Any, *, success: bool) -> Fields:
        self._stage = "finalization"
        summary, problem = accepted(result, ToolEvalBenchResult, summarize_tool_eval_bench)
        if summary is not None:
            self._reconcile(summary)
        progress = self._progress_text()
        level: Level = "progress"
        if not success:
            level, message = "error", f"{_TOOL} failed after {progress}"
        elif problem:
            level, message = "warning", f"{_TOOL} finished ({progress}), but its result is unusable: {problem}"
        elif summary is not None and summary.measured:
            message = f"{_TOOL} finished: {_outcome_text(summary)}"
        elif summary is None and self._current():
            message = f"{_TOOL} finished ({progress}; no result to reconcile with)"
        else:
            level, message = "warning", f"{_TOOL} finished but measured nothing ({progress})"
        if not success and problem:
            message += f"; its result is unusable: {problem}"
        if summary is not None and summary.error:
            message += f"; the tool reported: {printable(summary.error, 1000)}"
        fields = self._report(message, level=level, figures=summary.figures if summary else None)
        fields["status"] = "succeeded" if success else "failed"
        return fields

    # -- events --------------------------------------------------------------------------

    def _started(self, event: dict[str, Any]) -> Fields | None:
        scenario = self._scenario_id(event)
        if isinstance(scenario, BadLine):
            return self._ignore(scenario.problem)
        total = self._total(event)
        if isinstance(total, BadLine):
            return self._ignore(total.problem)
        self._stage = "scenarios"
        note = self._announce(total)
        title = text(event.get("title"), 200)
        category = text(event.get("category"), 40)
        message = f"Scenario {printable(scenario, MAX_SCENARIO_ID_CHARS)}"
        message += f" ({category})" if category else ""
        message += f" started: {title}" if title else " started"
        return self._report(message + note, level="warning" if note else "info")

    def _result(self, event: dict[str, Any]) -> Fields | None:
        scenario = self._scenario_id(event)
        if isinstance(scenario, BadLine):
            return self._ignore(scenario.problem)
        total = self._total(event)
        if isinstance(total, BadLine):
            return self._ignore(total.problem)
        status = event.get("status")
        code = _CODES.get(status) if type(status) is str else None
        points = count(event.get("points"), _MAX_POINTS)
        if code is None or points is None:
            return self._invalid(event, "status" if code is None else "points", "event")
        self._stage = "scenarios"
        self._received += 1
        note = self._record(scenario, points * 3 + code, remember=self._trials == 1)
        note += self._announce(total)
        shown = printable(scenario, MAX_SCENARIO_ID_CHARS)
        self._last = {"last_scenario_id": shown, "last_status": _STATUSES[code], "last_points": points}
        duration = number(event.get("duration_seconds"), 1e9)
        if duration is not None:
            self._last["last_duration_seconds"] = duration
        plural = "point" if points == 1 else "points"
        message = f"{shown}: {_STATUSES[code]}, {points} {plural} ({self._progress_text()})"
        return self._report(message + note, level="warning" if note else "progress")

    def _complete(self, event: dict[str, Any]) -> Fields:
        self._stage = "finalization"
        score = number(event.get("final_score"), 100)
        message = f"{_TOOL} completed its scenarios ({self._progress_text()})"
        if score is None:
            return self._report(message)
        shown = int(score) if score.is_integer() else round(score, 1)
        message += f"; final score {shown} (advisory until the result is accepted)"
        return self._report(message, figures={"advisory_final_score": score})

    def _tool_notice(self, kind: str, event: dict[str, Any]) -> Fields | None:
        if kind == "log" and event.get("level") not in ("warning", "error", "critical"):
            return None
        if not self._tool_notices.admit():
            return None
        detail = text(event.get("message"), 1000) or "(no message)"
        if kind == "error":
            code = text(event.get("error"), 80) or "error"
            message = f"{_TOOL} reported an error ({code}): {detail}"
        elif kind == "log":
            message = f"{_TOOL} logged a {event['level']}: {detail}"
        else:
            warnings = event.get("safety_warnings")
            many = len(warnings) if isinstance(warnings, list) else 0
            message = f"{_TOOL}'s safety gate failed ({many} safety warnings)"
        return self._report(message, level="warning")

    # -- state ---------------------------------------------------------------------------

    def _scenario_id(self, event: dict[str, Any]) -> str | BadLine:
        scenario = event.get("scenario_id")
        if type(scenario) is not str or not 0 < len(scenario) <= MAX_SCENARIO_ID_CHARS:
            kind = printable(event["event"], 40)
            return BadLine(f"line {self._decoder.lines}: {kind} has an invalid scenario_id {short_repr(scenario)}")
        return scenario

    def _total(self, event: dict[str, Any]) -> int | BadLine | None:
        if "total" not in event:
            return None
        total = count(event["total"], _MAX_TOTAL)
        if total is None:
            kind = printable(event["event"], 40)
            return BadLine(f"line {self._decoder.lines}: {kind} has an invalid total {short_repr(event['total'])}")
        return total

    def _announce(self, total: int | None) -> str:
        """Take an announced total; a note when it makes the total unknown (one trial only)."""
        if total is None or self._trials > 1:
            return ""
        if self._announced is None:
            self._announced = total
        if self._total_known and total != self._announced:
            self._total_known = False
            return f"; the tool announced {total} scenarios after {self._announced}, so the total is now unknown"
        return self._check_overrun()

    def _check_overrun(self) -> str:
        announced = self._announced
        if self._trials == 1 and self._total_known and announced is not None and self._current() > announced:
            self._total_known = False
            return f"; more scenarios reported than the {self._announced} announced, so the total is now unknown"
        return ""

    def _record(self, scenario: str, packed: int, *, remember: bool) -> str:
        note = ""
        if remember:
            old = self._outcomes.get(scenario)
            if old is not None:
                self._tally(old, -1)
                self._outcomes[scenario] = packed
            elif len(self._outcomes) < MAX_SCENARIO_IDS:
                self._outcomes[scenario] = packed
            else:
                self._unremembered += 1
                if self._unremembered == 1:
                    note = f"; over {MAX_SCENARIO_IDS} distinct scenarios, repeats are no longer told apart"
        self._tally(packed, 1)
        return note + self._check_overrun()

    def _tally(self, packed: int, sign: int) -> None:
        self._tallies[packed % 3] += sign
        self._points += sign * (packed // 3)

    def _reconcile(self, summary: ToolEvalBenchResult) -> None:
        """Final counts from the accepted result: the file, not the live stream, is the authority.

        The total stays what the tool announced; it becomes unknown if the file
        holds more distinct scenarios than that, and is never made up here.
        """
        self._tallies = [summary.passed, summary.partial, summary.failed]
        self._points = summary.points if summary.points is not None else self._points
        if self._trials > 1:
            if summary.trials == self._trials:
                self._received = summary.scenarios * summary.trials
            return
        self._final = summary.distinct_scenarios
        self._check_overrun()

    def _current(self) -> int:
        if self._trials > 1:
            return self._received
        return self._final if self._final is not None else len(self._outcomes) + self._unremembered

    def _progress_text(self) -> str:
        if self._trials > 1:
            return f"{self._received} scenario results, {self._trials} trials"
        if self._total_known and self._announced is not None:
            return f"{self._current()} of {self._announced} scenarios"
        return f"{self._current()} scenarios"

    def _report(self, message: str, *, level: Level = "progress", figures: dict[str, Any] | None = None) -> Fields:
        fields: Fields = {"message": message, "level": level, "stage": self._stage, "status": "running"}
        fields["unit"] = "scenarios" if self._trials == 1 else "scenario results"
        fields["current"] = self._current()
        if self._trials == 1 and self._total_known and self._announced is not None:
            fields["total"], fields["total_kind"] = self._announced, "exact"
        else:
            fields["total_kind"] = "unknown"
        metrics: dict[str, MetricValue] = {
            "scenarios_passed": self._tallies[0],
            "scenarios_partial": self._tallies[1],
            "scenarios_failed": self._tallies[2],
            "points": self._points,
            "scenario_results": self._received,
            "trials": self._trials,
            **self._last,
        }
        if figures:
            metrics.update(figures)
        if self._bad_lines.seen:
            metrics["ignored_lines"] = self._bad_lines.seen
        fields["metrics"] = metrics
        return fields


def _outcome_text(summary: ToolEvalBenchResult) -> str:
    parts = [f"{summary.passed} pass, {summary.partial} partial, {summary.failed} fail"]
    if summary.points is not None and summary.max_points is not None:
        parts.append(f"{summary.points} of {summary.max_points} points")
    if summary.score is not None:
        parts.insert(0, f"score {summary.score:g}")
    return ", ".join(parts)
