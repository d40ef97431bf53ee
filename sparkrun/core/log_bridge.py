"""Legacy logging bridge: plain log records become ``type: "log"`` events.

Plugins written before structured feedback report through Python logging.
While an operation with a subscriber is running, records at PROGRESS (25),
WARNING and ERROR that their logger accepted are forwarded to that operation
as ``log`` events. The bridge hooks the log record factory rather than adding
a handler, so the application's logging configuration (root level, handlers,
``basicConfig`` and the last-resort handler) behaves exactly as without it,
and the factory is restored when the last bridged operation ends.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sparkrun.core.envelope import MAX_MESSAGE_CHARS, MAX_TEXT_CHARS

__all__ = ["PROGRESS", "disable", "enable", "log_event", "suppressed"]

PROGRESS = 25
logging.addLevelName(PROGRESS, "PROGRESS")

_lock = threading.Lock()
_users = 0
_installed: _BridgeFactory | None = None
_local = threading.local()


def _level_name(levelno: int) -> str:
    if levelno >= logging.ERROR:
        return "error"
    return "warning" if levelno >= logging.WARNING else "progress"


def _message_of(record: logging.LogRecord) -> str:
    try:
        message = record.getMessage()
    except Exception:
        message = str(record.msg)
    if record.exc_info and record.exc_info[1] is not None:
        error = record.exc_info[1]
        message = f"{message}: {type(error).__name__}: {error}"
    return message[:MAX_MESSAGE_CHARS] or "(empty log message)"


def log_event(operation_id: str, record: logging.LogRecord) -> dict[str, Any]:
    """The ``log`` event that represents ``record`` in an operation."""
    return {
        "type": "log",
        "operation_id": operation_id,
        "timestamp": record.created,
        "source": (record.name or "root")[:MAX_TEXT_CHARS],
        "message": _message_of(record),
        "level": _level_name(record.levelno),
    }


class _BridgeFactory:
    """A log record factory that forwards qualifying records, then returns them."""

    __slots__ = ("previous",)

    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        if record.levelno >= PROGRESS and _users and not getattr(_local, "depth", 0):
            _forward(record)
        return record


def _forward(record: logging.LogRecord) -> None:
    from sparkrun.core.operation import current_operation

    if getattr(record, "_sparkrun_forwarded", False):
        return
    operation = current_operation()
    if operation is None or not operation.has_subscribers:
        return
    record._sparkrun_forwarded = True
    operation.deliver(log_event(operation.operation_id, record))


def enable() -> None:
    """Start forwarding (reference counted: one call per bridged operation)."""
    global _users, _installed
    with _lock:
        _users += 1
        current = logging.getLogRecordFactory()
        if current is not _installed:
            _installed = _BridgeFactory(current)
            logging.setLogRecordFactory(_installed)


def disable() -> None:
    """Stop forwarding for one operation; restore the factory after the last one.

    If somebody replaced the factory meanwhile, theirs is left in place and
    ours (which they may still call) stays inert until the next operation.
    """
    global _users, _installed
    with _lock:
        _users = max(0, _users - 1)
        if _users == 0 and _installed is not None:
            if logging.getLogRecordFactory() is _installed:
                logging.setLogRecordFactory(_installed.previous)
            _installed = None


@contextmanager
def suppressed() -> Iterator[None]:
    """Do not forward records created in this block (they are already events)."""
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
