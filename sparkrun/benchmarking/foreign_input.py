"""What a benchmark framework wrote, decoded strictly and made safe to show.

Progress lines and result files come from another program, which may be a
different version than the one we read, broken, or fed hostile text by the
model it benchmarks. JSON is decoded with limits Python's ``json`` does not
have: a key given twice in one object is refused (two readers could disagree
on its value), an integer of more than :data:`MAX_INT_DIGITS` digits is refused
before Python spends time converting it, and nesting deeper than the
interpreter's recursion limit is a decoding error, not a crash. ``NaN`` and
``Infinity`` decode as floats; the readers refuse them in the fields they use.
"""

from __future__ import annotations

import json
from typing import Any

from sparkrun.core.short_repr import short_repr

__all__ = ["MAX_INT_DIGITS", "ForeignJSONError", "loads", "printable"]

#: int64 has 19 digits; one more lets "out of range" be told apart from "absurd".
MAX_INT_DIGITS = 20


class ForeignJSONError(ValueError):
    """Foreign text is not JSON we accept; the message says what is wrong."""


def printable(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (ending in "...") with every unprintable character as U+FFFD.

    Control characters, terminal escape sequences, invisible format characters
    (bidirectional overrides) and lone surrogates are unprintable: foreign text
    reaches terminals, logs and JSON encoders, and must not redraw anyone's screen.
    """
    if len(text) > limit:
        text = text[: max(limit - 3, 0)] + "..." if limit >= 3 else text[:limit]
    return text if text.isprintable() else "".join(ch if ch.isprintable() else "\ufffd" for ch in text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ForeignJSONError(f"the key {short_repr(printable(key, 80))} appears twice in one object")
            seen.add(key)
    return result


def _integer(text: str) -> int:
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise ForeignJSONError(f"an integer has {digits} digits (limit {MAX_INT_DIGITS})")
    return int(text)


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_int=_integer)


def loads(text: str) -> Any:
    """The JSON value of ``text``; raises :class:`ForeignJSONError` naming what is wrong."""
    try:
        return _DECODER.decode(text)
    except ForeignJSONError:
        raise
    except json.JSONDecodeError as exc:
        raise ForeignJSONError(f"not valid JSON: {exc.msg.removesuffix(' at')} at character {exc.pos}") from None
    except RecursionError:
        raise ForeignJSONError("nested too deeply to decode") from None
    except (ValueError, OverflowError) as exc:  # defensive: a conversion the decoder delegates
        raise ForeignJSONError(f"not valid JSON: {short_repr(str(exc))}") from None
