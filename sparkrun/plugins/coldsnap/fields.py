"""Checks of single wire fields, shared by the timing stream and the receipt.

Each check returns the value when it is good and raises :class:`FieldError`
otherwise, with a message that names the field (as the caller spells its
path), quotes the value briefly and states the rule or the limit. The caller
adds where it was (a line of the timing stream, a receipt file) and raises
its own error type. Booleans are never numbers here, and ``1.0`` is not the
integer ``1``: the controller writes JSON, and JSON keeps the difference.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from sparkrun.core.short_repr import short_repr
from sparkrun.plugins.coldsnap.canonical import is_digest, is_safe_id

__all__ = [
    "FieldError",
    "check_array",
    "check_choice",
    "check_digest",
    "check_id",
    "check_integer",
    "check_keys",
    "check_object",
    "check_seconds",
    "check_text",
    "quote",
    "request_value",
]

#: Digests are 71 characters; strings up to this length are quoted whole.
_DIGEST_QUOTE = 80


class FieldError(ValueError):
    """One field breaks a rule; the message starts with the field's path."""


def quote(value: Any) -> str:
    """A short ``repr`` of a wire value; a string the length of a digest is shown whole."""
    if type(value) is str and len(value) <= _DIGEST_QUOTE:
        return repr(value)
    return short_repr(value)


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), type(value).__name__
    )


def check_object(field: str, value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object."""
    if type(value) is not dict:
        raise FieldError(f"{field} must be an object, not {_type_name(value)} {short_repr(value)}")
    return value


def check_array(field: str, value: Any, low: int, high: int) -> list[Any]:
    """``value`` if it is a JSON array of ``low`` to ``high`` entries."""
    if type(value) is not list:
        raise FieldError(f"{field} must be an array, not {_type_name(value)} {short_repr(value)}")
    if not low <= len(value) <= high:
        raise FieldError(f"{field} has {len(value)} entries; it must have {low} to {high}")
    return value


def check_keys(
    field: str, value: dict[str, Any], required: Collection[str], optional: Collection[str] = (), *, closed: bool = True
) -> None:
    """Every key in ``required`` is present and, if ``closed``, no key outside ``required`` and ``optional`` is."""
    for key in value if closed else ():
        if key not in required and key not in optional:
            allowed = ", ".join(sorted([*required, *optional]))
            raise FieldError(f"{field} has an unknown key {short_repr(key)}; the keys are {allowed}")
    for key in required:
        if key not in value:
            raise FieldError(f"{field} has no {key!r}; it is required")


def check_text(field: str, value: Any, limit: int, *, allow_empty: bool = False) -> str:
    """``value`` if it is a string of at most ``limit`` characters (non-empty unless ``allow_empty``)."""
    if type(value) is not str:
        raise FieldError(f"{field} must be a string, not {_type_name(value)} {short_repr(value)}")
    if len(value) > limit:
        raise FieldError(f"{field} is {len(value)} characters long; the limit is {limit}")
    if not value and not allow_empty:
        raise FieldError(f"{field} is empty; it must be 1 to {limit} characters")
    return value


def check_id(field: str, value: Any) -> str:
    """``value`` if it is a safe id (``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$``)."""
    if not is_safe_id(value):
        if type(value) is not str:
            raise FieldError(f"{field} must be a string, not {_type_name(value)} {short_repr(value)}")
        raise FieldError(
            f"{field} is {short_repr(value)}; an id is 1 to 128 characters from A-Z a-z 0-9 . _ - "
            "and starts with a letter or digit"
        )
    return str(value)


def check_digest(field: str, value: Any) -> str:
    """``value`` if it is a ``sha256:`` digest of 64 lowercase hex digits."""
    if not is_digest(value):
        raise FieldError(f"{field} is {quote(value)}; expected 'sha256:' followed by 64 lowercase hex digits")
    return str(value)


def check_choice(field: str, value: Any, allowed: Collection[str]) -> str:
    """``value`` if it is one of the ``allowed`` strings."""
    if type(value) is not str or value not in allowed:
        raise FieldError(f"{field} is {short_repr(value)}; expected one of {', '.join(allowed)}")
    return value


def check_integer(field: str, value: Any, low: int, high: int) -> int:
    """``value`` if it is a JSON integer from ``low`` to ``high``."""
    if type(value) is not int:
        raise FieldError(f"{field} must be an integer, not {_type_name(value)} {short_repr(value)}")
    if not low <= value <= high:
        raise FieldError(f"{field} is {short_repr(value)}; it must be an integer from {low} to {high}")
    return value


def check_seconds(field: str, value: Any) -> float:
    """``value`` if it is a finite number of seconds, at least 0 (an int stays an int)."""
    if type(value) is not int and type(value) is not float:
        raise FieldError(f"{field} must be a number, not {_type_name(value)} {short_repr(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite or value < 0:
        raise FieldError(f"{field} is {short_repr(value)}; it must be a finite number of seconds >= 0")
    return value


def request_value(request: Mapping[str, Any], *path: str) -> Any:
    """The request's value at ``path`` (keys into nested objects), or None where it has none."""
    value: Any = request
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value
