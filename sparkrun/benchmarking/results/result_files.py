"""Reading a framework's result file, and checking the fields a reader uses.

A result file's path comes from the run's own layout, but its content comes
from the framework: the file is read like any untrusted file (regular files
only, bounded size, UTF-8; see :mod:`sparkrun.core.text_files`), decoded as
strict JSON (:mod:`sparkrun.benchmarking.foreign_input`), and every field a
reader uses is checked. Every refusal is a :class:`ResultFileError` naming
the file, the field and the value.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sparkrun.benchmarking.foreign_input import ForeignJSONError, loads, printable
from sparkrun.core.envelope import INT64_MAX, MAX_METRIC_STRING_CHARS
from sparkrun.core.short_repr import short_repr
from sparkrun.core.text_files import read_text_file
from sparkrun.errors import SparkrunError

__all__ = ["FigureValue", "ResultFields", "ResultFileError", "read_result_json"]

FigureValue = float | int | str


class ResultFileError(SparkrunError, ValueError):
    """A result file that cannot be read or holds an invalid field.

    ``name`` is the file (or ``"result"`` for an already decoded object),
    ``field`` the dotted path of the field and ``value`` a short quotation of
    what it held; each is ``None`` when it does not apply.
    """

    def __init__(self, message: str, *, name: str | None = None, field: str | None = None, value: str | None = None):
        super().__init__(message)
        self.name = name
        self.field = field
        self.value = value


def read_result_json(path: str | os.PathLike[str], *, what: str, limit: int) -> Any:
    """The decoded JSON of the result file at ``path`` (at most ``limit`` bytes)."""
    raw = os.fspath(path)
    name = printable(raw, 1024)
    try:
        text = read_text_file(Path(raw), what=what, limit=limit, error=ResultFileError)
    except ResultFileError as exc:  # the same refusal, with the path as it may be shown
        raise ResultFileError(str(exc).replace(f"path={raw}", f"path={name}"), name=name) from exc.__cause__
    try:
        return loads(text)
    except ForeignJSONError as exc:
        raise ResultFileError(f"{what} is not usable JSON (path={name}, {exc})", name=name) from None


class ResultFields:
    """Checks the fields of one decoded result; each failure names the file, the field and the value."""

    def __init__(self, what: str, name: str) -> None:
        self.what = what
        self.name = printable(name, 1024)

    def invalid(self, field: str, value: object, expected: str) -> ResultFileError:
        quoted = short_repr(value)
        return ResultFileError(
            f"{self.what} has an invalid field (path={self.name}, field={field}, value={quoted}; expected {expected})",
            name=self.name,
            field=field,
            value=quoted,
        )

    def mapping(self, value: object, field: str) -> dict[str, Any]:
        if type(value) is not dict:
            raise self.invalid(field, value, "a JSON object")
        return value

    def array(self, value: object, field: str, *, limit: int) -> list[Any]:
        if type(value) is not list:
            raise self.invalid(field, value, "a JSON array")
        if len(value) > limit:
            raise self.invalid(field, f"<array of {len(value)} items>", f"at most {limit} items")
        return value

    def count(self, value: object, field: str) -> int:
        if type(value) is not int or not 0 <= value <= INT64_MAX:
            raise self.invalid(field, value, f"an integer from 0 to {INT64_MAX}")
        return value

    def number(self, value: object, field: str, *, limit: float | None = None) -> float | int:
        """A finite number from 0 (to ``limit``, if given); NaN and infinities fail the range test."""
        if type(value) is int or type(value) is float:  # noqa: SIM102 (narrowing first keeps mypy exact)
            if 0 <= value <= INT64_MAX and (limit is None or value <= limit):
                return value
        expected = "a finite number >= 0" if limit is None else f"a finite number from 0 to {limit:g}"
        raise self.invalid(field, value, expected)

    def flag(self, value: object, field: str) -> bool:
        if type(value) is not bool:
            raise self.invalid(field, value, "true or false")
        return value

    def label(self, value: object, field: str) -> str:
        """A string field as it may be shown (printable, cut to the metric string limit)."""
        if type(value) is not str:
            raise self.invalid(field, value, "a string")
        return printable(value, MAX_METRIC_STRING_CHARS)
