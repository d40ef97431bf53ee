"""Validation of feedback envelopes, contract version 1.

Envelopes are validated once, where they are produced, so every consumer
(terminal, journal, OpenTelemetry, a non-Python client) can trust them. A bad
payload raises ``ValueError`` naming the field, what is wrong with the value
and the limit it broke. The checks are written for the hot path: plain type
tests and length comparisons, no copies beyond the flat ``metrics`` mapping.
"""

from __future__ import annotations

from math import isfinite
from typing import Any

__all__ = [
    "COUNTER_FIELDS",
    "FEEDBACK_API_VERSION",
    "LEVELS",
    "MAX_MESSAGE_CHARS",
    "MAX_METRICS",
    "MAX_METRIC_KEY_CHARS",
    "MAX_METRIC_STRING_CHARS",
    "MAX_TEXT_CHARS",
    "STATUSES",
    "TOTAL_KINDS",
    "apply_fields",
    "check_level",
    "check_message",
    "check_text",
]

FEEDBACK_API_VERSION = 1

MAX_MESSAGE_CHARS = 16_384
MAX_TEXT_CHARS = 512
MAX_METRIC_KEY_CHARS = 128
MAX_METRIC_STRING_CHARS = 512
MAX_METRICS = 32

#: Level names and the Python logging level each renders at.
LEVELS: dict[str, int] = {"debug": 10, "info": 20, "progress": 25, "warning": 30, "error": 40}
STATUSES = ("running", "succeeded", "failed", "skipped")
TOTAL_KINDS = ("exact", "upper_bound", "unknown")
COUNTER_FIELDS = ("current", "total")
_FIELD_NAMES = ("stage", "status", "current", "total", "total_kind", "unit", "metrics")


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _bad_length(field: str, length: int, limit: int) -> ValueError:
    if length == 0:
        return ValueError(f"{field} is empty; it must be 1 to {limit} characters")
    return ValueError(f"{field} is {length} characters long; the limit is {limit}")


def check_text(field: str, value: Any, limit: int = MAX_TEXT_CHARS) -> str:
    """Return ``value`` if it is a non-empty string of at most ``limit`` characters."""
    if not isinstance(value, str):
        raise ValueError(f"{field} must be a string, not {type(value).__name__} {_describe(value)}")
    length = len(value)
    if length == 0 or length > limit:
        raise _bad_length(field, length, limit)
    return value


def check_message(value: Any) -> str:
    """Return ``value`` if it is a usable human-readable message."""
    if type(value) is str and 0 < len(value) <= MAX_MESSAGE_CHARS:
        return value
    return check_text("message", value, MAX_MESSAGE_CHARS)


def check_level(value: Any) -> int:
    """Return the logging level number of a feedback level name."""
    levelno = LEVELS.get(value) if isinstance(value, str) else None
    if levelno is None:
        raise ValueError(f"level is {_describe(value)}; expected one of {', '.join(LEVELS)}")
    return levelno


def _check_enum(field: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed or not isinstance(value, str):
        raise ValueError(f"{field} is {_describe(value)}; expected one of {', '.join(allowed)}")
    return value


def _check_counter(field: str, value: Any) -> int | float:
    kind = type(value)
    if kind is not int and kind is not float and (kind is bool or not isinstance(value, (int, float))):
        raise ValueError(f"{field} must be an int or float, not {kind.__name__} {_describe(value)}")
    if not isfinite(value) or value < 0:
        raise ValueError(f"{field} is {value!r}; counters must be finite and >= 0")
    return value


def _check_metric_value(key: str, value: Any) -> Any:
    kind = type(value)
    if kind is str:
        if len(value) > MAX_METRIC_STRING_CHARS:
            raise ValueError(
                f"metrics[{key!r}] is {len(value)} characters long; "
                f"the limit for metric strings is {MAX_METRIC_STRING_CHARS}"
            )
    elif kind is float:
        if not isfinite(value):
            raise ValueError(f"metrics[{key!r}] is {value!r}; metric numbers must be finite")
    elif kind is not int and kind is not bool and value is not None:
        raise ValueError(
            f"metrics[{key!r}] is a {kind.__name__} {_describe(value)}; "
            "metric values must be JSON scalars (str, int, float, bool or None)"
        )
    return value


def _check_metrics(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"metrics must be a dict, not {type(value).__name__} {_describe(value)}")
    if len(value) > MAX_METRICS:
        raise ValueError(f"metrics has {len(value)} entries; the limit is {MAX_METRICS}")
    for key, item in value.items():
        if not isinstance(key, str):
            raise ValueError(f"metrics key {_describe(key)} must be a string")
        if not 0 < len(key) <= MAX_METRIC_KEY_CHARS:
            raise _bad_length(f"metrics key {_describe(key)}", len(key), MAX_METRIC_KEY_CHARS)
        _check_metric_value(key, item)
    return dict(value)


def apply_fields(event: dict[str, Any], fields: dict[str, Any]) -> None:
    """Validate the optional activity and counter ``fields`` into ``event``.

    ``None`` means "not given". ``total_kind`` defaults to ``exact`` when a
    total is given and is ``unknown`` for counters without one.
    """
    total_kind = None
    for name, value in fields.items():
        if value is None:
            continue
        if name == "current" or name == "total":
            event[name] = _check_counter(name, value)
        elif name == "stage" or name == "unit":
            event[name] = check_text(name, value)
        elif name == "status":
            event[name] = _check_enum(name, value, STATUSES)
        elif name == "total_kind":
            total_kind = _check_enum(name, value, TOTAL_KINDS)
        elif name == "metrics":
            event[name] = _check_metrics(value)
        else:
            raise ValueError(f"{name} is not a feedback field; expected one of {', '.join(_FIELD_NAMES)}")
    if "total" in event:
        if total_kind is None:
            total_kind = "exact"
        elif total_kind == "unknown":
            raise ValueError("total_kind is 'unknown' but a total is given; use 'exact' or 'upper_bound'")
        event["total_kind"] = total_kind
    elif total_kind is not None and total_kind != "unknown":
        raise ValueError(f"total_kind is {total_kind!r} but no total is given; it must be 'unknown' without a total")
    elif total_kind is not None or "current" in event:
        event["total_kind"] = "unknown"
