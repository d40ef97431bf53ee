"""Validation of feedback envelopes, contract version 1.

Envelopes are validated once, where they are produced, so every consumer
(terminal, journal, OpenTelemetry, a non-Python client) can trust them. A bad
payload raises ``ValueError`` naming the field, what is wrong with the value
and the limit it broke. The checks are written for the hot path: plain type
tests and length comparisons, no copies beyond the flat ``metrics`` mapping.
Instances of ``str``, ``int`` or ``float`` subclasses are copied to the
built-in type, so no consumer runs a producer's methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import isfinite
from typing import Any, TypeVar

from sparkrun.core.events import FeedbackEvent, Level, Status, TotalKind
from sparkrun.core.short_repr import short_repr

__all__ = [
    "COUNTER_FIELDS",
    "FEEDBACK_API_VERSION",
    "INT64_MAX",
    "INT64_MIN",
    "LEVELS",
    "LEVEL_NAMES",
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
#: Integers (counters, metric values) must fit OTLP's int64 attributes.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
_INFINITY = float("inf")

#: Each level's name by the Python logging level it renders at, and the other way round.
LEVEL_NAMES: dict[int, Level] = {10: "debug", 20: "info", 25: "progress", 30: "warning", 40: "error"}
LEVELS: dict[str, int] = {name: levelno for levelno, name in LEVEL_NAMES.items()}
STATUSES: tuple[Status, ...] = ("running", "succeeded", "failed", "skipped")
TOTAL_KINDS: tuple[TotalKind, ...] = ("exact", "upper_bound", "unknown")
COUNTER_FIELDS = ("current", "total")
_FIELD_NAMES = ("host", "stage", "status", "current", "total", "total_kind", "unit", "metrics")
#: Each allowed value by its name: a lookup gives back the value as its literal type.
_STATUS_NAMES: dict[str, Status] = {status: status for status in STATUSES}
_TOTAL_KIND_NAMES: dict[str, TotalKind] = {kind: kind for kind in TOTAL_KINDS}
_Name = TypeVar("_Name", bound=str)


def _bad_length(field: str, length: int, limit: int) -> ValueError:
    if length == 0:
        return ValueError(f"{field} is empty; it must be 1 to {limit} characters")
    return ValueError(f"{field} is {length} characters long; the limit is {limit}")


def _plain(value: Any) -> str | int | float | None:
    """The built-in ``str``, ``int`` or ``float`` copy of a subclass instance, else ``None``."""
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    return None


def check_text(field: str, value: object, limit: int = MAX_TEXT_CHARS) -> str:
    """Return ``value`` as a plain ``str`` if it is a non-empty string of at most ``limit`` characters."""
    if type(value) is not str:
        if not isinstance(value, str):
            raise ValueError(f"{field} must be a string, not {type(value).__name__} {short_repr(value)}")
        value = str.__str__(value)
    length = len(value)
    if length == 0 or length > limit:
        raise _bad_length(field, length, limit)
    return value


def check_message(value: object) -> str:
    """Return ``value`` (as a plain ``str``) if it is a usable human-readable message."""
    if type(value) is str and 0 < len(value) <= MAX_MESSAGE_CHARS:
        return value
    return check_text("message", value, MAX_MESSAGE_CHARS)


def check_level(value: Any) -> int:
    """Return the logging level number of a feedback level name."""
    if type(value) is not str and isinstance(value, str):
        value = str.__str__(value)
    levelno = LEVELS.get(value) if type(value) is str else None
    if levelno is None:
        raise ValueError(f"level is {short_repr(value)}; expected one of {', '.join(LEVELS)}")
    return levelno


def _check_enum(field: str, value: Any, allowed: Mapping[str, _Name]) -> _Name:
    if type(value) is not str and isinstance(value, str):
        value = str.__str__(value)
    checked = allowed.get(value) if type(value) is str else None
    if checked is None:
        raise ValueError(f"{field} is {short_repr(value)}; expected one of {', '.join(allowed)}")
    return checked


def _check_counter(field: str, value: Any) -> int | float:
    kind = type(value)
    if kind is int:
        if 0 <= value <= INT64_MAX:
            integer: int = value  # kind is int
            return integer
        if value > 0:
            raise ValueError(f"{field} is {short_repr(value)}; integer counters must be at most {INT64_MAX} (int64)")
    elif kind is float:
        if 0.0 <= value < _INFINITY:
            number: float = value  # kind is float
            return number
    else:
        plain = _plain(value)
        if plain is None or type(plain) is str:
            raise ValueError(f"{field} must be an int or float, not {kind.__name__} {short_repr(value)}")
        return _check_counter(field, plain)
    raise ValueError(f"{field} is {short_repr(value)}; counters must be finite and >= 0")


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
    elif kind is int:
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueError(
                f"metrics[{key!r}] is {short_repr(value)}; "
                f"metric integers must be from {INT64_MIN} to {INT64_MAX} (int64)"
            )
    elif kind is not bool and value is not None:
        plain = _plain(value)
        if plain is None:
            raise ValueError(
                f"metrics[{key!r}] is a {kind.__name__} {short_repr(value)}; "
                "metric values must be JSON scalars (str, int, float, bool or None)"
            )
        return _check_metric_value(key, plain)
    return value


def _check_metrics(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"metrics must be a dict, not {type(value).__name__} {short_repr(value)}")
    if len(value) > MAX_METRICS:
        raise ValueError(f"metrics has {len(value)} entries; the limit is {MAX_METRICS}")
    metrics: dict[str, Any] = {}
    for key, item in value.items():
        if type(key) is not str:
            if not isinstance(key, str):
                raise ValueError(f"metrics key {short_repr(key)} must be a string")
            key = str.__str__(key)
        if not 0 < len(key) <= MAX_METRIC_KEY_CHARS:
            raise _bad_length(f"metrics key {short_repr(key)}", len(key), MAX_METRIC_KEY_CHARS)
        metrics[key] = _check_metric_value(key, item)
    return metrics


def apply_fields(event: FeedbackEvent, fields: dict[str, Any]) -> None:
    """Validate the optional activity and counter ``fields`` into ``event``.

    ``None`` means "not given". A total needs ``total_kind`` (``exact`` or
    ``upper_bound``: only the caller knows whether a percentage is honest);
    counters without a total are ``unknown``. ``host`` is a per-report host
    that overrides the reporter's.
    """
    total_kind: TotalKind | None = None
    for name, value in fields.items():
        if value is None:
            continue
        # One branch per field, so each key is a literal of FeedbackEvent (same comparisons as before).
        if name == "current":
            event["current"] = _check_counter(name, value)
        elif name == "total":
            event["total"] = _check_counter(name, value)
        elif name == "stage":
            event["stage"] = check_text(name, value)
        elif name == "unit":
            event["unit"] = check_text(name, value)
        elif name == "host":
            event["host"] = check_text(name, value)
        elif name == "status":
            event["status"] = _check_enum(name, value, _STATUS_NAMES)
        elif name == "total_kind":
            total_kind = _check_enum(name, value, _TOTAL_KIND_NAMES)
        elif name == "metrics":
            event["metrics"] = _check_metrics(value)
        else:
            raise ValueError(f"{name} is not a feedback field; expected one of {', '.join(_FIELD_NAMES)}")
    if "total" in event:
        if total_kind is None or total_kind == "unknown":
            raise ValueError(
                f"total_kind must be exact or upper_bound when total is present (total_kind={total_kind!r})"
            )
        event["total_kind"] = total_kind
    elif total_kind is not None and total_kind != "unknown":
        raise ValueError(f"total_kind is {total_kind!r} but no total is given; it must be 'unknown' without a total")
    elif total_kind is not None or "current" in event:
        event["total_kind"] = "unknown"
