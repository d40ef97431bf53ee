"""Short, safe quotations of values for error messages.

An error message quotes the value that broke a rule, and that value is
whatever a caller or a file supplied: a megabyte string, a list that YAML
aliases made billions of items long, an integer with thousands of digits, or
an object whose ``__repr__`` raises. Quoting must stay cheap and must never
raise, or the error would hide behind another one.
"""

from __future__ import annotations

import builtins
import reprlib
from typing import Any

__all__ = ["SHORT_REPR_CHARS", "short_repr", "shorten"]

#: Length of a quotation, "..." included.
SHORT_REPR_CHARS = 60
#: Larger integers are described by size: decimal digits cost quadratic time (and
#: Python refuses more than 4300 of them by default).
_MAX_INT_BITS = 4096


class _Bounded(reprlib.Repr):
    """``reprlib`` limits for containers; strings and integers keep their head, not their middle."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxdict = self.maxlist = self.maxtuple = self.maxset = self.maxfrozenset = self.maxdeque = 8

    def repr_str(self, x: str, level: int) -> str:
        return builtins.repr(x[: SHORT_REPR_CHARS + 1])

    def repr_int(self, x: int, level: int) -> str:
        bits = x.bit_length()
        return builtins.repr(x) if bits <= _MAX_INT_BITS else f"<int of {bits} bits>"

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            return builtins.repr(x)
        except Exception:
            return _unprintable(x)


_BOUNDED = _Bounded()


def _unprintable(value: Any) -> str:
    try:
        return f"<unprintable {type(value).__name__}>"
    except Exception:  # a metaclass can break even the type's name
        return "<unprintable value>"


def shorten(text: str, limit: int = SHORT_REPR_CHARS) -> str:
    """``text`` cut to ``limit`` characters, ending in "..." when cut."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def short_repr(value: Any, limit: int = SHORT_REPR_CHARS) -> str:
    """A ``repr`` of ``value`` of at most ``limit`` characters; never raises.

    The work is bounded too: long strings are sliced before quoting, nested
    containers show a few items of a few levels, and a value whose ``repr``
    fails shows as ``<unprintable TYPE>``.
    """
    try:
        text = _BOUNDED.repr(value)
    except Exception:
        text = _unprintable(value)
    return shorten(text, limit)
