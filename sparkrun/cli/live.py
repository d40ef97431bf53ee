"""Live terminal rendering of an operation's events.

On a terminal (rich): phase lines ``[n/6]``, a percentage bar only for exact
totals, "X of up to Y" for upper bounds, a spinner for unknown totals,
warnings and errors highlighted; bars disappear when their activity ends or
the operation does. Elsewhere (pipes, CI logs): one plain line per event.
The renderer is the operation's subscriber, so it must stay quick; rich
redraws from its own thread.

What it shows depends on verbosity: ``info`` reports only with ``-v``,
``debug`` ones only with ``-vv``, and ``-q`` keeps warnings, errors and
failed phases. The failure of the operation as a whole (a failed phase, the
failure report of a root activity) is held until the operation ends: the
command's final ``error:`` line states it, so a held line is printed only if
it says something else, and nothing is printed after Ctrl+C but the
command's own line.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from sparkrun.cli.render import describe_event, is_feedback, is_progress
from sparkrun.core.events import Event, FeedbackEvent, ProgressEvent

__all__ = ["EventRecorder", "LiveRenderer", "counter_text", "describe_progress", "fan_out"]

_TERMINAL = ("succeeded", "failed", "skipped")
#: Looked up with whatever an event holds (an event of a later kind may hold anything there).
_STATUS_STYLE: dict[object, str] = {"succeeded": "green", "failed": "bold red", "skipped": "dim", "running": "cyan"}
_DETAIL_LEVELS: dict[object, int] = {"info": 1, "debug": 2}


def describe_progress(event: ProgressEvent) -> str:
    """A launch phase event as ``[n/6] message`` (a failed phase without its reason: the error line has it)."""
    if event.get("status") == "failed":
        return f"[{event['phase']}/{event['total_phases']}] {event['label']}: failed"
    return f"[{event['phase']}/{event['total_phases']}] {event['message']}"


def _notable(event: Event) -> bool:
    """What ``-q`` still shows: warnings, errors and failed phases."""
    return event.get("level") in ("warning", "error") or event.get("status") == "failed"


def _whole_failure(event: Event) -> bool:
    """The operation failing as a whole: a failed launch phase, or a root activity's failure report."""
    if event.get("status") != "failed":
        return False
    return event.get("type") == "progress" or (event.get("type") == "feedback" and "parent_id" not in event)


def _plain(event: Event) -> str:
    return describe_progress(event) if is_progress(event) else describe_event(event)


def _amount(value: float, unit: str | None) -> str:
    if unit == "bytes":
        for suffix in ("B", "KiB", "MiB", "GiB", "TiB"):
            if abs(value) < 1024 or suffix == "TiB":
                return f"{value:.0f} {suffix}" if suffix == "B" else f"{value:.1f} {suffix}"
            value /= 1024
    text = f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"
    return f"{text} {unit}" if unit else text


def counter_text(event: FeedbackEvent) -> str:
    """How a counter reads: exact totals as a fraction, upper bounds as "of up to"."""
    unit = event.get("unit")
    current = _amount(event["current"], unit)
    kind = event.get("total_kind", "unknown")
    if kind == "upper_bound":
        return f"{current} of up to {_amount(event['total'], unit)}"
    if kind == "exact":
        return f"{current} of {_amount(event['total'], unit)}"
    return current


class LiveRenderer:
    """A subscriber that draws events for a person; use it as a context manager."""

    def __init__(
        self,
        stream: IO[str] | None = None,
        *,
        force_terminal: bool | None = None,
        quiet: bool = False,
        verbose: int = 0,
    ) -> None:
        stream = stream if stream is not None else sys.stdout
        self._stream = stream
        self._quiet = quiet
        self._verbose = verbose
        self._gone = False
        self._held: list[Event] = []
        self._rich = force_terminal if force_terminal is not None else stream.isatty()
        self._console: Any = None
        self._progress: Any = None
        self._tasks: dict[str, Any] = {}
        self._waiting: Any = None
        if self._rich:
            from rich.console import Console

            self._console = Console(file=stream, force_terminal=True, highlight=False)

    def __enter__(self) -> LiveRenderer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if isinstance(error, KeyboardInterrupt):
            self.close(interrupted=True)
        else:
            self.close(error=str(error) if error is not None else None)

    def close(self, *, error: str | None = None, interrupted: bool = False) -> None:
        """End the live display; print held failure lines that add to ``error`` (none if ``interrupted``)."""
        if self._progress is not None:
            self._progress.stop()
            self._progress, self._tasks, self._waiting = None, {}, None
        held, self._held = self._held, []
        if interrupted:
            return
        for event in held:
            if event.get("type") == "feedback" and error is not None and event["message"] in error:
                continue  # the command's error line says the same
            self._show(event)

    def waiting(self, text: str) -> None:
        """Show a transient status line (terminals only) until the next event arrives."""
        if not self._rich or self._gone:
            return
        progress = self._bar()
        if self._waiting is None:
            self._waiting = progress.add_task(text, total=None, counter="")
        else:
            progress.update(self._waiting, description=text)

    def __call__(self, event: Event) -> None:
        if self._gone or not self._wanted(event):
            return
        if self._waiting is not None:
            self._progress.remove_task(self._waiting)
            self._waiting = None
        if _whole_failure(event):
            self._finish_counter(event)
            self._held.append(event)
            return
        self._show(event)

    def _wanted(self, event: Event) -> bool:
        if self._quiet:
            return _notable(event)
        return self._verbose >= _DETAIL_LEVELS.get(event.get("level", ""), 0)

    def _show(self, event: Event) -> None:
        if not self._rich:
            try:
                self._stream.write(_plain(event) + "\n")
                self._stream.flush()
            except BrokenPipeError:
                self._gone = True  # the reader left (`| head`); the operation goes on regardless
            return
        if is_feedback(event) and "current" in event and event.get("status") not in _TERMINAL:
            self._update_counter(event)
            return
        self._finish_counter(event)
        self._print(event)

    def _print(self, event: Event) -> None:
        from rich.text import Text

        level = event.get("level")
        if is_progress(event):
            style = _STATUS_STYLE.get(event["status"], "")
            line = Text(f"[{event['phase']}/{event['total_phases']}] ", style="bold")
            line.append(describe_progress(event).split("] ", 1)[1], style=style)
        elif level in ("warning", "error"):
            line = Text(f"{level}: ", style="bold yellow" if level == "warning" else "bold red")
            line.append(f"{event.get('source', '')}: {event['message']}")
        else:
            line = Text(describe_event(event), style=_STATUS_STYLE.get(event.get("status", ""), "dim"))
        self._console.print(line)

    def _bar(self) -> Any:
        if self._progress is None:
            from rich.progress import BarColumn, Progress, SpinnerColumn, TaskProgressColumn, TextColumn

            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[counter]}"),
                console=self._console,
                transient=True,
            )
            self._progress.start()
        return self._progress

    def _update_counter(self, event: FeedbackEvent) -> None:
        progress = self._bar()
        exact = event.get("total_kind") == "exact"
        total = event["total"] if exact else None  # only exact totals make a percentage
        task = self._tasks.get(event["activity_id"])
        who = event["source"] + (f"@{event['host']}" if "host" in event else "")
        description = f"{who}: {event['message']}"
        if task is None:
            task = progress.add_task(description, total=total, counter=counter_text(event))
            self._tasks[event["activity_id"]] = task
        progress.update(
            task, description=description, completed=event["current"], total=total, counter=counter_text(event)
        )

    def _finish_counter(self, event: Event) -> None:
        activity_id = event.get("activity_id")
        task = self._tasks.pop(activity_id, None) if isinstance(activity_id, str) else None
        if task is not None and self._progress is not None:
            self._progress.remove_task(task)


class EventRecorder:
    """A subscriber that writes every event as one JSON line.

    Given a path it appends to that file (``--events-jsonl``) and owns it;
    given a stream (``--json`` on stdout) it only writes to it.
    """

    def __init__(self, target: Path | IO[str]) -> None:
        if isinstance(target, Path):
            target.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[str] = open(target, "a", encoding="utf-8")  # noqa: SIM115 - closed by close()
            self._owned = True
        else:
            self._file, self._owned = target, False
        self._gone = False

    def __call__(self, event: Event) -> None:
        if self._gone:
            return
        try:
            self._file.write(json.dumps(event) + "\n")
            self._file.flush()
        except BrokenPipeError:
            self._gone = True  # the reader left (`| head`); the operation goes on regardless

    def close(self) -> None:
        if self._owned:
            self._file.close()


def fan_out(*subscribers: Callable[[Event], object] | None) -> Callable[[Event], None]:
    """One subscriber that hands each event to several, in order."""
    present = [subscriber for subscriber in subscribers if subscriber is not None]

    def deliver(event: Event) -> None:
        for subscriber in present:
            subscriber(event)

    return deliver
