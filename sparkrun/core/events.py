"""The types of the native event stream, as every consumer sees them.

An event is made and validated once, where it is produced; after that the
subscribers, the journal, the daemon's stream and the OpenTelemetry adapter
all take the same typed dicts. Each has ``type``, ``operation_id``,
``timestamp`` (Unix seconds) and a human-readable ``message``, so a client
that knows none of the types can still show every event. ``type`` tells them
apart (a tagged union). The JSON Schemas in ``sparkrun/schemas/`` describe
the same shapes for other languages.
"""

from __future__ import annotations

from typing import Any, Literal, Required, TypeAlias, TypedDict

__all__ = [
    "BenchmarkEvent",
    "Event",
    "FeedbackEvent",
    "Level",
    "LogEvent",
    "ProgressEvent",
    "SetupEvent",
    "Status",
    "TotalKind",
]

Level: TypeAlias = Literal["debug", "info", "progress", "warning", "error"]
Status: TypeAlias = Literal["running", "succeeded", "failed", "skipped"]
TotalKind: TypeAlias = Literal["exact", "upper_bound", "unknown"]


class _Common(TypedDict):
    """What every event has: a client that knows no type can still show it."""

    operation_id: str
    timestamp: float
    message: str


class FeedbackEvent(_Common, total=False):
    """The normalized ``type: "feedback"`` envelope, as delivered and returned."""

    type: Required[Literal["feedback"]]
    feedback_version: Required[int]
    source: Required[str]
    level: Required[Level]
    activity_id: Required[str]
    parent_id: str
    host: str
    stage: str
    status: Status
    current: int | float
    total: int | float
    total_kind: TotalKind
    unit: str
    metrics: dict[str, str | int | float | bool | None]


class LogEvent(_Common):
    """A legacy log record at PROGRESS, WARNING or ERROR, forwarded from inside an operation."""

    type: Literal["log"]
    source: str
    level: Literal["progress", "warning", "error"]


class _Step(TypedDict):
    index: int
    total: int
    label: str


class ProgressEvent(_Common, total=False):
    """One of a launch's six phases changing state, or a step within a running phase."""

    type: Required[Literal["progress"]]
    phase: Required[int]
    total_phases: Required[int]
    slug: Required[str]
    label: Required[str]
    status: Required[Status]
    step: _Step
    duration_seconds: float
    reason: str


class BenchmarkEvent(_Common, total=False):
    """A benchmark run's milestone (its kind's fields travel beside the common ones)."""

    type: Required[Literal["benchmark"]]
    kind: Required[str]
    benchmark_id: Required[str]
    total_tasks: int
    title: str
    index: int
    label: str
    success: bool
    duration_s: float
    results: Any
    resumed: bool


class SetupEvent(_Common, total=False):
    """A host preparation step, in the free form that predates the feedback envelope."""

    type: Required[Literal["setup"]]
    source: Required[str]
    step: str
    status: Status


#: Any event of the native stream.
Event: TypeAlias = FeedbackEvent | LogEvent | ProgressEvent | BenchmarkEvent | SetupEvent
