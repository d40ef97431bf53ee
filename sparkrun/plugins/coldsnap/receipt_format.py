"""The controller's receipt format: read from its file and parsed strictly.

The receipt is authoritative. A missing receipt file is tolerated (there is
then no timing and no startup observation), but a receipt that is present
must be usable, and anything wrong with it is a :class:`ReceiptError`: not
JSON, another kind or format, a missing, unknown or ill-typed field, or
invalid timing (:func:`.timing_objects.validate_timing`). Checks against the
request and the exit code live in :mod:`.receipt`.

sparkrun's readings where the contract is silent: unknown top-level keys and
unknown keys in ``result`` are refused (the format has a version number for
additions), while the values of ``result.artifact``, ``result.output`` and
``result.prepared`` are the controller's business and any JSON value is kept;
``error`` is a non-empty string or an object with a non-empty string
``message`` and an optional ``type``, and on a succeeded receipt even
``"error": null`` counts as present; timestamps may carry 0 to 9 fractional
digits and any UTC offset; ``completed_at`` is not compared with ``started_at``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sparkrun.core.text_files import read_text_file
from sparkrun.errors import ColdSnapError
from sparkrun.plugins.coldsnap.canonical import strict_loads
from sparkrun.plugins.coldsnap.fields import (
    FieldError,
    check_choice,
    check_digest,
    check_id,
    check_keys,
    check_object,
    check_seconds,
    check_text,
    quote,
)
from sparkrun.plugins.coldsnap.timing_objects import Clock, Span, TimingError, validate_timing

__all__ = [
    "MAX_RECEIPT_BYTES",
    "OPERATIONS",
    "RECEIPT_FORMAT",
    "RECEIPT_KIND",
    "RECEIPT_STATES",
    "RESULT_KEYS",
    "Receipt",
    "ReceiptError",
    "parse_receipt",
    "read_receipt",
]

RECEIPT_KIND = "coldsnap-operation-receipt"
RECEIPT_FORMAT = 2
MAX_RECEIPT_BYTES = 64 * 1024 * 1024
OPERATIONS = ("capture", "publish", "publish-native", "restore", "sleep", "wake", "status")
RECEIPT_STATES = ("succeeded", "failed")
RESULT_KEYS = ("artifact", "output", "prepared")
_REQUIRED = (
    "format",
    "kind",
    "operation_id",
    "operation",
    "state",
    "request_sha256",
    "engine",
    "snapshot_driver",
    "replay_semantics",
    "started_at",
    "completed_at",
    "duration_seconds",
    "timing",
    "result",
)
_MAX_NAME_CHARS = 128
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?"
    r"(?:[Zz]|([+-])([0-9]{2}):([0-9]{2}))"
)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class ReceiptError(ColdSnapError):
    """The controller's receipt is unusable or contradicts the request; the message names the field and value."""


@dataclass(frozen=True)
class Receipt:
    """A parsed receipt. ``timing`` is the object as decoded (its digest is ``timing_sha256``)."""

    operation_id: str
    operation: str
    state: str
    request_sha256: str
    engine: str
    snapshot_driver: str
    replay_semantics: str
    started_at: str
    started_at_unix: float
    completed_at: str
    completed_at_unix: float
    duration_seconds: float
    timing: Mapping[str, Any]
    clocks: Mapping[str, Clock]
    spans: tuple[Span, ...]
    result: Mapping[str, Any]
    error: str | Mapping[str, Any] | None = None

    @property
    def error_message(self) -> str | None:
        """The failure's message (from a string ``error`` or its ``message``), or None."""
        if isinstance(self.error, Mapping):
            return str(self.error["message"])
        return self.error

    @property
    def error_type(self) -> str | None:
        """The failure's ``type`` when ``error`` is an object that has one."""
        return str(self.error["type"]) if isinstance(self.error, Mapping) and "type" in self.error else None


def _timestamp(field: str, value: Any) -> tuple[str, float]:
    """The text and Unix seconds (correctly rounded from exact nanoseconds) of an RFC 3339 timestamp."""
    text = check_text(field, value, 64)
    found = _RFC3339.fullmatch(text)
    if found is None:
        raise FieldError(
            f"{field} is {quote(text)}; expected an RFC 3339 timestamp such as '2025-01-31T12:00:00.123456789Z'"
        )
    year, month, day, hour, minute, second, fraction, sign, offset_hours, offset_minutes = found.groups()
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC)
    except ValueError as exc:
        raise FieldError(f"{field} is {quote(text)}; it is not a real date and time ({exc})") from None
    offset = 0
    if sign is not None:
        if int(offset_hours) > 23 or int(offset_minutes) > 59:
            raise FieldError(f"{field} is {quote(text)}; its UTC offset is out of range")
        offset = (int(offset_hours) * 60 + int(offset_minutes)) * 60 * (1 if sign == "+" else -1)
    seconds = (moment - _EPOCH) // timedelta(seconds=1) - offset
    nanoseconds = seconds * 1_000_000_000 + int((fraction or "").ljust(9, "0"))
    return text, nanoseconds / 1_000_000_000


def _error(state: str, receipt: dict[str, Any]) -> str | dict[str, Any] | None:
    if state == "succeeded":
        if "error" in receipt:
            raise FieldError(f"error is {quote(receipt['error'])}; a succeeded receipt has no error")
        return None
    if "error" not in receipt:
        raise FieldError("has no 'error'; a failed receipt needs one")
    value = receipt["error"]
    if type(value) is str:
        if not value:
            raise FieldError("error is empty; a failed receipt needs a message")
        return value
    if type(value) is not dict:
        raise FieldError(f"error is {quote(value)}; expected a message or an object with a message")
    check_keys("error", value, ("message",), ("type",))
    if type(value["message"]) is not str or not value["message"]:
        raise FieldError(f"error.message is {quote(value['message'])}; a failed receipt needs a non-empty message")
    if "type" in value:
        check_text("error.type", value["type"], _MAX_NAME_CHARS)
    return value


def _constant(receipt: dict[str, Any], key: str, expected: object) -> None:
    if key not in receipt:
        raise FieldError(f"has no {key!r}; expected {expected!r}")
    value = receipt[key]
    if type(value) is not type(expected) or value != expected:
        raise FieldError(f"{key} is {quote(value)}; expected {expected!r}")


def _parse(value: Any) -> Receipt:
    receipt = check_object("the receipt", value)
    _constant(receipt, "kind", RECEIPT_KIND)
    _constant(receipt, "format", RECEIPT_FORMAT)
    # Open, unlike the timing stream: a later controller may add a field without breaking restores.
    check_keys("the receipt", receipt, _REQUIRED, ("error",), closed=False)
    operation_id = check_id("operation_id", receipt["operation_id"])
    operation = check_choice("operation", receipt["operation"], OPERATIONS)
    state = check_choice("state", receipt["state"], RECEIPT_STATES)
    request_sha256 = check_digest("request_sha256", receipt["request_sha256"])
    engine = check_text("engine", receipt["engine"], _MAX_NAME_CHARS)
    snapshot_driver = check_text("snapshot_driver", receipt["snapshot_driver"], _MAX_NAME_CHARS)
    replay_semantics = check_text("replay_semantics", receipt["replay_semantics"], _MAX_NAME_CHARS)
    started_at, started_unix = _timestamp("started_at", receipt["started_at"])
    completed_at, completed_unix = _timestamp("completed_at", receipt["completed_at"])
    duration_seconds = check_seconds("duration_seconds", receipt["duration_seconds"])
    result = check_object("result", receipt["result"])
    check_keys("result", result, (), RESULT_KEYS, closed=False)
    error = _error(state, receipt)
    try:
        clocks, spans = validate_timing(receipt["timing"], "timing")
    except TimingError as exc:
        raise FieldError(str(exc)) from None
    return Receipt(
        operation_id=operation_id,
        operation=operation,
        state=state,
        request_sha256=request_sha256,
        engine=engine,
        snapshot_driver=snapshot_driver,
        replay_semantics=replay_semantics,
        started_at=started_at,
        started_at_unix=started_unix,
        completed_at=completed_at,
        completed_at_unix=completed_unix,
        duration_seconds=duration_seconds,
        timing=receipt["timing"],
        clocks=clocks,
        spans=tuple(spans),
        result=result,
        error=error,
    )


def parse_receipt(text: str, *, origin: str = "receipt") -> Receipt:
    """The :class:`Receipt` in ``text``; :class:`ReceiptError` starting with ``origin`` if it is unusable."""
    try:
        return _parse(strict_loads(text))
    except ValueError as exc:  # FieldError, or the decoder's reason
        raise ReceiptError(f"{origin}: {exc}") from None


def read_receipt(path: str | os.PathLike[str]) -> Receipt | None:
    """The receipt at ``path``, or None when there is no file there.

    The file must be a regular file of at most 64 MiB of UTF-8; every other
    problem is a :class:`ReceiptError` naming the path.
    """
    try:
        text = read_text_file(Path(path), what="receipt", limit=MAX_RECEIPT_BYTES, error=ReceiptError)
    except ReceiptError as exc:
        if isinstance(exc.__cause__, FileNotFoundError):
            return None
        raise
    return parse_receipt(text, origin=f"receipt {path}")
