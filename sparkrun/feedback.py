"""Structured feedback, API version 1: what producers (plugins, core code) call.

A :class:`FeedbackReporter` describes one *activity* of an operation. Each
report becomes a validated envelope delivered to the operation's subscribers
regardless of logging verbosity, and is also rendered as one ordinary log
record so plain logging keeps working. ``sparkrun.plugins`` re-exports this
module's public names for plugin authors.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sparkrun.core import log_bridge
from sparkrun.core.envelope import (
    FEEDBACK_API_VERSION,
    LEVEL_NAMES,
    LEVELS,
    MAX_MESSAGE_CHARS,
    apply_fields,
    check_level,
    check_message,
    check_text,
)
from sparkrun.core.events import FeedbackEvent, Level
from sparkrun.core.operation import Operation, current_operation, new_operation_id
from sparkrun.core.short_repr import short_repr

if TYPE_CHECKING:
    from sparkrun.core.context import SparkrunContext

__all__ = ["FEEDBACK_API_VERSION", "FeedbackEvent", "FeedbackReporter", "get_feedback"]

_log = logging.getLogger(__name__)
_time = time.time
_PROGRESS, _WARNING, _ERROR = LEVELS["progress"], LEVELS["warning"], LEVELS["error"]
#: Heartbeat intervals, seconds: shorter floods consumers, longer says nothing.
_MIN_HEARTBEAT_INTERVAL = 0.01
_MAX_HEARTBEAT_INTERVAL = 86_400


def _new_activity_id() -> str:
    return secrets.token_hex(8)


class FeedbackReporter:
    """Reports the progress of one activity of an operation.

    Obtain one with :func:`get_feedback` inside the operation, before starting
    background work: a reporter keeps its operation in every thread it is
    used from. :meth:`child` describes a sub-activity (another host, a
    sub-step, a controller span) of the same operation.
    """

    __slots__ = ("_base", "_logger", "_operation", "activity_id", "host", "parent_id", "source")

    def __init__(
        self,
        source: str,
        *,
        operation: Operation | None,
        operation_id: str,
        logger: logging.Logger | None = None,
        activity_id: str | None = None,
        parent_id: str | None = None,
        host: str | None = None,
    ) -> None:
        self.source = check_text("source", source)
        self.activity_id = _new_activity_id() if activity_id is None else check_text("activity_id", activity_id)
        self.parent_id = None if parent_id is None else check_text("parent_id", parent_id)
        self.host = None if host is None else check_text("host", host)
        if self.activity_id == self.parent_id:
            raise ValueError(f"activity_id {self.activity_id!r} is the parent's own activity id; it must differ")
        self._operation = operation
        self._logger = logger if logger is not None else logging.getLogger(self.source)
        # timestamp, message and level are set by every report (_emit); these only hold their places.
        base: FeedbackEvent = {
            "type": "feedback",
            "feedback_version": FEEDBACK_API_VERSION,
            "operation_id": operation_id,
            "timestamp": 0.0,
            "source": self.source,
            "message": "",
            "level": "progress",
            "activity_id": self.activity_id,
        }
        if self.parent_id is not None:
            base["parent_id"] = self.parent_id
        if self.host is not None:
            base["host"] = self.host
        self._base = base

    def __repr__(self) -> str:
        return f"<FeedbackReporter source={self.source!r} activity_id={self.activity_id!r}>"

    @property
    def operation_id(self) -> str:
        return self._base["operation_id"]

    def child(
        self,
        *,
        source: str | None = None,
        activity_id: str | None = None,
        host: str | None = None,
        logger: logging.Logger | None = None,
    ) -> FeedbackReporter:
        """A reporter for a sub-activity: same operation, parent = this activity.

        ``activity_id`` accepts a foreign id (say, a controller's span id);
        prefix it with this reporter's ``activity_id`` so it cannot collide
        with another activity of the operation. Source, host and logger are
        inherited unless given; a new source gets its own logger.
        """
        if logger is None:
            logger = self._logger if source is None else None
        return FeedbackReporter(
            self.source if source is None else source,
            operation=self._operation,
            operation_id=self._base["operation_id"],
            logger=logger,
            activity_id=activity_id,
            parent_id=self.activity_id,
            host=self.host if host is None else host,
        )

    def _emit(
        self, level: Level, levelno: int, message: str, fields: dict[str, Any], log_message: bool
    ) -> FeedbackEvent:
        if type(message) is not str or not 0 < len(message) <= MAX_MESSAGE_CHARS:
            message = check_message(message)
        event = self._base.copy()
        event["timestamp"] = _time()
        event["message"] = message
        event["level"] = level
        if fields:
            apply_fields(event, fields)
        operation = self._operation
        if operation is not None:
            operation.deliver(event)
        if log_message and self._logger.isEnabledFor(levelno):
            # stacklevel 3: the record names the producer's call site, not progress() or this method
            log_bridge.log_delivered(self._logger, levelno, message, event, stacklevel=3)
        return event

    def report(
        self, message: str, *, level: str = "progress", log_message: bool = True, **fields: Any
    ) -> FeedbackEvent:
        """Report at any level; returns the normalized envelope.

        ``fields`` are the optional envelope fields: ``stage``, ``status``,
        ``current``, ``total``, ``total_kind``, ``unit``, ``metrics``. With
        ``log_message=False`` no log record is rendered (for frontends that
        display the envelope themselves); delivery happens either way.
        """
        levelno = check_level(level)
        return self._emit(LEVEL_NAMES[levelno], levelno, message, fields, log_message)

    def progress(self, message: str, *, log_message: bool = True, **fields: Any) -> FeedbackEvent:
        """Report normal progress (level ``progress``, logged at PROGRESS = 25)."""
        return self._emit("progress", _PROGRESS, message, fields, log_message)

    def warning(self, message: str, *, log_message: bool = True, **fields: Any) -> FeedbackEvent:
        """Report something the user should know about that does not stop the work."""
        return self._emit("warning", _WARNING, message, fields, log_message)

    def error(self, message: str, *, log_message: bool = True, **fields: Any) -> FeedbackEvent:
        """Report a failure of this activity (the operation's own result stays authoritative)."""
        return self._emit("error", _ERROR, message, fields, log_message)

    @contextmanager
    def heartbeat(
        self, label: str | Callable[[], str], *, interval: float = 30.0, stage: str | None = None
    ) -> Iterator[None]:
        """Report silent work every ``interval`` seconds until the block exits.

        Reports ``label`` (or what the callable returns, asked each time) once
        on entry, then from a background thread with ``elapsed_seconds`` as a
        metric, under ``stage`` when given (so a view grouping by stage sees
        the long phase as it starts). The thread has been joined when the block
        exits. ``interval`` must be 0.01 to 86400 seconds (``ValueError``
        otherwise).
        """
        if type(interval) not in (int, float) or not _MIN_HEARTBEAT_INTERVAL <= interval <= _MAX_HEARTBEAT_INTERVAL:
            raise ValueError(
                f"interval is {short_repr(interval)}; it must be a number of seconds "
                f"from {_MIN_HEARTBEAT_INTERVAL} to {_MAX_HEARTBEAT_INTERVAL}"
            )
        text: Callable[[], str] = label if callable(label) else (lambda: label)
        staged: dict[str, Any] = {"stage": stage} if stage is not None else {}
        self.progress(text(), status="running", metrics={"elapsed_seconds": 0.0}, **staged)
        started = time.monotonic()
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(interval):
                try:
                    elapsed = round(time.monotonic() - started, 3)
                    self.progress(text(), status="running", metrics={"elapsed_seconds": elapsed}, **staged)
                except Exception:
                    _log.exception("heartbeat of %s could not report", self.source)

        thread = threading.Thread(
            target=contextvars.copy_context().run, args=(beat,), name=f"sparkrun-heartbeat-{self.source}", daemon=True
        )
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def get_feedback(
    source: str, *, sctx: SparkrunContext | None = None, logger: logging.Logger | None = None
) -> FeedbackReporter:
    """A reporter for ``source`` (a stable plugin or component name).

    The reporter belongs to the calling context's operation or, when ``sctx``
    is given, to that context's running operation, so it works from threads
    that do not carry the context. A context with a subscriber but no running
    operation still receives the events, under a detached operation id. With
    neither, the reporter only logs (and still returns each envelope).
    ``logger`` keeps a plugin's existing logger; the default is
    ``logging.getLogger(source)``.
    """
    operation = current_operation()
    if sctx is not None and (operation is None or operation.context is not sctx):
        operation = sctx.operation
        if operation is None and sctx.events is not None:
            operation = Operation("detached", subscriber=sctx.events, context=sctx)
    operation_id = operation.operation_id if operation is not None else new_operation_id()
    return FeedbackReporter(source, operation=operation, operation_id=operation_id, logger=logger)
