"""Canonical JSON, digests and strict decoding: the byte-level agreements with the controller.

sparkrun and the controller each compute ``request_sha256`` and
``timing_sha256`` on their own, so both must serialize the same value to the
same bytes: sorted keys, ``,``/``:`` without spaces, ASCII only (non-ASCII as
``\\uXXXX``, characters above the BMP as surrogate pairs), floats as Python's
``repr``, integers as integers. Anything that has no single JSON spelling
(NaN, infinities, non-string keys, non-JSON types) is refused rather than
guessed at. The decoder is strict in the other direction: duplicate keys,
trailing data, ``NaN`` literals and out-of-range numbers are errors, so a
record means one thing to every reader.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from sparkrun.core.short_repr import short_repr

__all__ = [
    "DIGEST_PATTERN",
    "ID_PATTERN",
    "MAX_REQUEST_BYTES",
    "canonical_json",
    "drop_empty",
    "is_digest",
    "is_safe_id",
    "request_text",
    "sha256_digest",
    "strict_loads",
]

#: ``request_sha256`` / ``timing_sha256``: the algorithm, a colon, 64 lowercase hex digits.
DIGEST_PATTERN = "^sha256:[0-9a-f]{64}$"
#: Request, clock, span, unit and worker ids.
ID_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
#: The request on the controller's stdin, newline included.
MAX_REQUEST_BYTES = 16 * 1024 * 1024

# ``fullmatch`` without the anchors: ``$`` would also accept a trailing newline.
_DIGEST = re.compile(DIGEST_PATTERN[1:-1])
_ID = re.compile(ID_PATTERN[1:-1])
#: Integers longer than this are refused while decoding: no wire field needs more, and
#: converting thousands of digits costs quadratic time.
_MAX_INT_DIGITS = 40


def is_digest(value: object) -> bool:
    """Whether ``value`` is a ``sha256:<64 lowercase hex>`` digest string."""
    return type(value) is str and _DIGEST.fullmatch(value) is not None


def is_safe_id(value: object) -> bool:
    """Whether ``value`` is an id of safe characters (letters, digits, ``._-``; 1 to 128, not starting with ``._-``)."""
    return type(value) is str and _ID.fullmatch(value) is not None


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list | dict) and len(value) == 0)


def drop_empty(value: Any) -> Any:
    """``value`` without mapping entries that are None, "", [] or {} (judged after cleaning inside them).

    The request is sent without empty fields so that "absent" has one
    spelling on both sides of the digest. List items are kept in place (their
    position means something); only their insides are cleaned.
    """
    if isinstance(value, Mapping):
        cleaned = {key: drop_empty(item) for key, item in value.items()}
        return {key: item for key, item in cleaned.items() if not _is_empty(item)}
    if isinstance(value, list | tuple):
        return [drop_empty(item) for item in value]
    return value


def _check_encodable(value: Any, path: str) -> None:
    """Raise ``ValueError`` naming the path of the first value with no single JSON spelling."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        kind = type(item)
        if kind is float:
            if not math.isfinite(item):
                raise ValueError(f"{where} is {item!r}; canonical JSON numbers must be finite")
        elif kind is dict:
            for key, child in item.items():
                if type(key) is not str:
                    raise ValueError(f"{where} has the key {short_repr(key)}; canonical JSON keys must be strings")
                stack.append((child, f"{where}.{key}"))
        elif kind is list or kind is tuple:
            stack.extend((child, f"{where}[{index}]") for index, child in enumerate(item))
        elif item is not None and kind not in (str, int, bool):
            raise ValueError(f"{where} is a {kind.__name__} {short_repr(item)}; expected a JSON value")


def canonical_json(value: Any) -> bytes:
    """The canonical ASCII bytes of ``value``; ``ValueError`` (naming the path) for what JSON cannot spell."""
    _check_encodable(value, "value")
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return text.encode("ascii")


def sha256_digest(value: Any) -> str:
    """``"sha256:"`` and the lowercase hex SHA-256 of ``canonical_json(value)``."""
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()


def request_text(request: Mapping[str, Any]) -> str:
    """The request as the controller reads it on stdin: sorted keys, indented, ending in a newline.

    Raises ``ValueError`` when it is larger than the controller accepts (16 MiB).
    """
    _check_encodable(request, "request")
    text = json.dumps(request, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
    if len(text) > MAX_REQUEST_BYTES:  # ASCII: one byte per character
        raise ValueError(f"request is {len(text)} bytes long as JSON; the limit is {MAX_REQUEST_BYTES} bytes (16 MiB)")
    return text


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, item in pairs:
        if key in result:
            raise _DuplicateKey(f"duplicate key {short_repr(key)}")
        result[key] = item
    return result


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number (numbers must be finite)")


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"the number {short_repr(text)} is out of range (numbers must be finite)")
    return number


def _short_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > _MAX_INT_DIGITS:
        raise ValueError(f"an integer has {digits} digits (the limit is {_MAX_INT_DIGITS})")
    return int(text)


_decoder = json.JSONDecoder(
    object_pairs_hook=_unique_keys, parse_constant=_no_constants, parse_float=_finite_float, parse_int=_short_int
)


def strict_loads(text: str) -> Any:
    """The one JSON value in ``text`` (surrounding whitespace allowed), else ``ValueError`` saying why.

    Refused: syntax errors, trailing data, duplicate keys at any depth,
    ``NaN``/``Infinity``, numbers that overflow, integers over 40 digits and
    nesting too deep for the parser.
    """
    try:
        value, end = _decoder.raw_decode(text, _skip_space(text, 0))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ValueError("not JSON this parser can read (nested too deeply)") from None
    except ValueError as exc:  # from the hooks
        raise ValueError(str(exc)) from None
    end = _skip_space(text, end)
    if end != len(text):
        line = text.count("\n", 0, end) + 1
        column = end - text.rfind("\n", 0, end)
        raise ValueError(f"trailing data after the JSON value at line {line} column {column}")
    return value


def _skip_space(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\n\r":
        index += 1
    return index
