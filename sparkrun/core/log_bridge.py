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
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, Protocol

from sparkrun.core.envelope import MAX_MESSAGE_CHARS, MAX_TEXT_CHARS
from sparkrun.core.events import Event, LogEvent

__all__ = ["PROGRESS", "disable", "enable", "log_delivered", "log_event", "suppressed"]

PROGRESS = 25
logging.addLevelName(PROGRESS, "PROGRESS")

_lock = threading.Lock()
_users = 0
_installed: _BridgeFactory | None = None
_local = threading.local()
#: Logger classes whose ``log`` path :func:`log_delivered` may take a shortcut through.
_PLAIN_LOGGERS = frozenset({logging.Logger, logging.RootLogger})
_UNKNOWN_CALLER = ("(unknown file)", 0, "(unknown function)")


def _level_name(levelno: int) -> Literal["progress", "warning", "error"]:
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


def log_event(operation_id: str, record: logging.LogRecord) -> LogEvent:
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

    def __init__(self, previous: Callable[..., logging.LogRecord]) -> None:
        self.previous = previous

    def __call__(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self.previous(*args, **kwargs)
        if record.levelno >= PROGRESS and _users and not getattr(_local, "depth", 0):
            _forward(record)
        return record


class BridgedOperation(Protocol):
    """What the bridge needs of the operation a record belongs to."""

    @property
    def operation_id(self) -> str: ...

    @property
    def has_subscribers(self) -> bool: ...

    def deliver(self, event: Event) -> bool: ...


def _no_operation() -> BridgedOperation | None:
    return None


#: How the bridge finds the operation of the calling context; given by :func:`enable`.
_current: Callable[[], BridgedOperation | None] = _no_operation


def _forward(record: logging.LogRecord) -> None:
    if getattr(record, "_sparkrun_forwarded", False):
        return
    operation = _current()
    if operation is None or not operation.has_subscribers:
        return
    record._sparkrun_forwarded = True
    operation.deliver(log_event(operation.operation_id, record))


def enable(current: Callable[[], BridgedOperation | None]) -> None:
    """Start forwarding to ``current()``'s operation (reference counted: one call per bridged operation)."""
    global _users, _installed, _current
    with _lock:
        _current = current
        _users += 1
        factory = logging.getLogRecordFactory()
        if factory is not _installed:
            _installed = _BridgeFactory(factory)
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


def log_delivered(logger: logging.Logger, levelno: int, message: str, event: Event, *, stacklevel: int = 1) -> None:
    """Log ``message`` on ``logger`` for an ``event`` that was already delivered.

    The record is the one ``logger.log(levelno, message, extra={"sparkrun_event":
    event}, stacklevel=stacklevel)`` would make at the same place, attributed to
    the same call site, and the bridge does not forward it (nor anything its
    handlers log). The caller checks ``logger.isEnabledFor(levelno)`` first.

    Every report renders a record by default, so this is on each producer's
    hot path. For plain ``Logger`` instances the record is built directly:
    the caller's frame instead of ``findCaller``'s walk, the record factory
    beneath the bridge's own (which would only see the suppression flag and
    pass the call on), the event set as an attribute instead of through
    ``extra``, then ``logger.handle`` as ``Logger.log`` does. That costs about
    half of ``Logger.log``'s generic path. Logger subclasses take
    ``Logger.log`` itself, so whatever they override still applies.
    """
    depth = getattr(_local, "depth", 0)
    _local.depth = depth + 1  # as suppressed(), inline: a generator context manager costs more than this
    try:
        if type(logger) not in _PLAIN_LOGGERS:
            logger.log(levelno, message, extra={"sparkrun_event": event}, stacklevel=stacklevel + 1)
            return
        if logging._srcfile:  # None when an application turned caller lookup off (logging's documented knob)
            try:
                frame = sys._getframe(stacklevel)  # 0 is this function, 1 its caller, as in stacklevel
            except ValueError:
                filename, lineno, function = _UNKNOWN_CALLER
            else:
                code = frame.f_code
                filename, lineno, function = code.co_filename, frame.f_lineno, code.co_name
        else:
            filename, lineno, function = _UNKNOWN_CALLER
        factory = logging.getLogRecordFactory()
        if type(factory) is _BridgeFactory:
            factory = factory.previous
        record = factory(logger.name, levelno, filename, lineno, message, (), None, function, None)
        record.sparkrun_event = event
        logger.handle(record)
    finally:
        _local.depth = depth
