"""The event types that predate the feedback envelope: ``benchmark`` and ``setup``.

Clients of other sparkrun hosts already consume them, so they travel
unchanged beside ``feedback`` envelopes: journaled, streamed, drawn by the
CLI and mapped to root-span events. ``benchmark`` events carry the kinds of
the benchmark contract (``task_progress`` is never one of them: its envelope
is the feedback event itself); ``setup`` events describe host preparation
steps in free form. Both are validated where they are made, like envelopes,
and raise ``ValueError`` naming the field.
"""

from __future__ import annotations

import time
from typing import Any, TypeVar, cast

from sparkrun.core import strict_json
from sparkrun.core.envelope import check_message, check_text
from sparkrun.core.events import BenchmarkEvent, SetupEvent
from sparkrun.core.operation import current_operation, new_operation_id

__all__ = ["BENCHMARK_FIELDS", "BENCHMARK_KINDS", "benchmark_event", "setup_event"]

#: Kind -> the fields that kind requires (besides ``benchmark_id``), from the benchmark contract.
BENCHMARK_FIELDS: dict[str, tuple[str, ...]] = {
    "schedule_started": ("total_tasks", "title"),
    "task_start": ("index", "label"),
    "task_end": ("index", "success", "duration_s"),
    "results_update": ("results",),
    "schedule_finished": ("total_tasks",),
    "run_complete": ("success", "resumed"),
}
BENCHMARK_KINDS = tuple(BENCHMARK_FIELDS)
_SETUP_STATUSES = ("running", "succeeded", "failed", "skipped")


_RESERVED = ("type", "operation_id", "timestamp", "message", "kind", "benchmark_id", "source", "step", "status")
_Legacy = TypeVar("_Legacy", BenchmarkEvent, SetupEvent)


def _deliver(event: _Legacy) -> _Legacy:
    operation = current_operation()
    event["operation_id"] = operation.operation_id if operation is not None else new_operation_id()
    if operation is not None:
        operation.deliver(event)
    return event


def _checked_fields(fields: dict[str, Any]) -> dict[str, Any]:
    for key, value in fields.items():
        if key in _RESERVED:
            raise ValueError(f"{key} is set by sparkrun; it cannot be an extra field")
        problem = strict_json.problem(value, key)
        if problem:
            raise ValueError(problem)
    return fields


def benchmark_event(kind: str, benchmark_id: str, message: str, **fields: Any) -> BenchmarkEvent:
    """Deliver a ``type: "benchmark"`` event to the current operation; returns it."""
    if kind not in BENCHMARK_FIELDS:
        raise ValueError(f"kind is {kind!r}; expected one of {', '.join(BENCHMARK_KINDS)}")
    missing = [name for name in BENCHMARK_FIELDS[kind] if name not in fields]
    if missing:
        raise ValueError(f"a {kind} event needs {', '.join(missing)}")
    event = {
        "type": "benchmark",
        "operation_id": "",
        "timestamp": time.time(),
        "message": check_message(message),
        "kind": kind,
        "benchmark_id": check_text("benchmark_id", benchmark_id),
        **_checked_fields(fields),
    }
    # The common fields are made above and the kind's fields were checked present and strict JSON; a
    # kind's fields travel beside them free-form, which a TypedDict cannot spell, hence the cast.
    return _deliver(cast(BenchmarkEvent, event))


def setup_event(
    message: str, *, source: str, step: str | None = None, status: str | None = None, **fields: Any
) -> SetupEvent:
    """Deliver a ``type: "setup"`` event (a host preparation step) to the current operation; returns it."""
    event: dict[str, Any] = {
        "type": "setup",
        "operation_id": "",
        "timestamp": time.time(),
        "message": check_message(message),
        "source": check_text("source", source),
    }
    if step is not None:
        event["step"] = check_text("step", step)
    if status is not None:
        if status not in _SETUP_STATUSES:
            raise ValueError(f"status is {status!r}; expected one of {', '.join(_SETUP_STATUSES)}")
        event["status"] = status
    event.update(_checked_fields(fields))
    # Made and checked above (a known status, plain text); extra fields are free-form strict JSON, which a
    # TypedDict cannot spell, hence the cast.
    return _deliver(cast(SetupEvent, event))
