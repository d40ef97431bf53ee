"""Strict JSON: what sparkrun stores and serves is readable by any JSON parser.

Python's ``json`` accepts and writes things other parsers reject: ``NaN`` and
``Infinity``, numbers that overflow to infinity (``1e400``), integers of any
size, and strings holding lone UTF-16 surrogates (from ``"\\ud800"`` escapes
or from file names that are not UTF-8, which Python decodes with
``surrogateescape``). One such value stored in a job would break every
listing that includes it, so input is checked where it comes in
(:func:`problem`, a 400 naming the field) and output produced by jobs is made
safe where it is produced (:func:`made_safe`).

The documented encoding of :func:`made_safe`: a string that is not valid
Unicode keeps its valid characters and has each lone surrogate replaced by
U+FFFD; a non-finite number or an integer beyond 64 bits is an error naming
the field (a job returning one fails with that message).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["INT64_MAX", "INT64_MIN", "StrictJSONError", "dumps", "made_safe", "problem"]

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_DEPTH = 64


class StrictJSONError(ValueError):
    """A value that cannot be stored as strict JSON; the message names the field."""


def _string_problem(path: str, text: str) -> str | None:
    if not text.isascii():
        found = _SURROGATE.search(text)
        if found is not None:
            return (
                f"{path} holds a lone surrogate (\\u{ord(found.group()):04x} at character {found.start()}); "
                "strings must be valid Unicode"
            )
    return None


def problem(value: Any, path: str = "value", *, depth: int = 0) -> str | None:
    """Why ``value`` is not strict JSON (naming the field by its path), or None if it is."""
    kind = type(value)
    if kind is str:
        return _string_problem(path, value)
    if kind is float:
        return None if math.isfinite(value) else f"{path} is {value!r}; JSON numbers must be finite"
    if kind is int:
        if INT64_MIN <= value <= INT64_MAX:
            return None
        return f"{path} has {len(str(abs(value)))} digits; JSON integers must fit in 64 bits (at most {INT64_MAX})"
    if value is None or kind is bool:
        return None
    if depth >= _MAX_DEPTH:
        return f"{path} is nested more than {_MAX_DEPTH} levels deep"
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"{path} has a key of type {type(key).__name__}; JSON keys are strings"
            found = _string_problem(f"{path} key {key[:40]!r}", key) or problem(item, f"{path}.{key}", depth=depth + 1)
            if found:
                return found
        return None
    if kind is list or kind is tuple:
        for index, item in enumerate(value):
            found = problem(item, f"{path}[{index}]", depth=depth + 1)
            if found:
                return found
        return None
    return f"{path} is a {kind.__name__}; expected a JSON value"


def made_safe(value: Any, path: str = "value") -> Any:
    """``value`` as strict JSON: lone surrogates become U+FFFD; other problems raise :class:`StrictJSONError`."""
    kind = type(value)
    if kind is str:
        return value if value.isascii() or not _SURROGATE.search(value) else _SURROGATE.sub("\ufffd", value)
    if kind is dict:
        return {made_safe(str(key), path): made_safe(item, f"{path}.{key}") for key, item in value.items()}
    if kind is list or kind is tuple:
        return [made_safe(item, f"{path}[{index}]") for index, item in enumerate(value)]
    found = problem(value, path)
    if found:
        raise StrictJSONError(found)
    return value


_encoder = json.JSONEncoder(ensure_ascii=True, allow_nan=False, separators=(",", ":"))


def dumps(value: Any) -> str:
    """Compact, ASCII-only JSON that refuses non-finite numbers (raises ``ValueError``)."""
    return _encoder.encode(value)
