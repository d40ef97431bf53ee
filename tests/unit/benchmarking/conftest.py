"""A harness that reports every parser answer through a real FeedbackReporter.

The envelope validator is the judge: an answer that is not a valid report
raises ``ValueError`` here, as it would in the runner. The runner's own three
metrics are added to each answer, as the runner does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from sparkrun.application import initialize
from sparkrun.core.operation import operation_scope
from sparkrun.core.strict_json import problem
from sparkrun.feedback import get_feedback

RUNNER_METRICS = {"benchmark_id": "bench_0123456789ab", "task_index": 0, "attempt_id": "0123456789abcdef"}


class Delivered:
    """Reports a parser's answers; keeps the delivered envelopes (answers that were None are skipped)."""

    def __init__(self, parser: Any, reporter: Any) -> None:
        self.parser = parser
        self.reporter = reporter
        self.events: list[dict[str, Any]] = []

    def _deliver(self, fields: Any) -> dict[str, Any]:
        metrics = fields.get("metrics", {})
        assert not RUNNER_METRICS.keys() & metrics.keys(), "a parser must not use the runner's metric names"
        event = self.reporter.report(log_message=False, **{**fields, "metrics": {**metrics, **RUNNER_METRICS}})
        assert_showable(event)
        self.events.append(event)
        return event

    def start(self) -> dict[str, Any]:
        return self._deliver(self.parser.start())

    def feed(self, line: Any) -> dict[str, Any] | None:
        fields = self.parser.feed(line)
        return None if fields is None else self._deliver(fields)

    def feed_all(self, lines: Any) -> list[dict[str, Any] | None]:
        return [self.feed(line) for line in lines]

    def finish(self, result: Any, *, success: bool) -> dict[str, Any]:
        return self._deliver(self.parser.finish(result, success=success))


def assert_showable(event: dict[str, Any]) -> None:
    """Text a terminal shows is printable and the event is strict JSON (no lone surrogates, finite numbers)."""
    assert event["message"].isprintable(), event["message"]
    for key, value in event.get("metrics", {}).items():
        assert not isinstance(value, str) or value.isprintable(), (key, value)
    assert problem(event) is None, problem(event)
    assert event.get("total_kind") != "upper_bound"


def _subscriber(event: dict[str, Any]) -> None:
    """The operation's subscriber: delivery happens; the harness keeps what it needs itself."""


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    sctx = initialize(state_dir=tmp_path_factory.mktemp("state"), config_path=None)
    sctx.events = _subscriber
    return sctx


@contextmanager
def delivering(context: Any, parser: Any) -> Iterator[Delivered]:
    """Inside an operation: a :class:`Delivered` for ``parser``, reporting with its source."""
    with operation_scope(context, name="benchmark"):
        yield Delivered(parser, get_feedback(parser.source))


def counters(event: dict[str, Any]) -> tuple[Any, ...]:
    """(stage, current, total, total_kind, unit, status) of a delivered envelope."""
    return (
        event.get("stage"),
        event.get("current"),
        event.get("total"),
        event.get("total_kind"),
        event.get("unit"),
        event.get("status"),
    )
