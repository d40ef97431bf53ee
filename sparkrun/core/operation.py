"""Operations: one unit of user-visible work and the delivery of its events.

An operation owns its id (also the OpenTelemetry trace id), its primary
subscriber (``sctx.events``), its observers (advisory consumers such as the
OpenTelemetry adapter or the daemon journal) and its cancellation flag.
Delivery is synchronous and serialized per operation: subscribers see events
one at a time, in the order they were produced, and an event produced from
inside a subscriber callback is not delivered again.


Why one module of this size: the operation, its scope, its observers and its
processors are the delivery contract of the feedback specification (serialized,
non-recursive, contained failures); the protocols it needs from a context
and the logging bridge are declared here so neither is imported.
"""

from __future__ import annotations

import contextvars
import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Literal, ParamSpec, Protocol, TypeVar

from sparkrun.core import log_bridge
from sparkrun.core.envelope import check_text
from sparkrun.core.events import Event
from sparkrun.core.registry import Registry
from sparkrun.errors import OperationCancelled

__all__ = [
    "DEFAULT_OPERATION_NAME",
    "EventProcessor",
    "Operation",
    "OperationContext",
    "OperationInfo",
    "OperationObserver",
    "Outcome",
    "Subscriber",
    "add_observer",
    "bind_process_default",
    "current_operation",
    "new_operation_id",
    "operation_scope",
    "remove_observer",
    "submit",
]

_log = logging.getLogger(__name__)

Outcome = Literal["succeeded", "failed", "cancelled"]
#: The primary consumer of an operation's events; what it returns is ignored.
Subscriber = Callable[[Event], object]
OBSERVER_ENTRY_POINT_GROUP = "sparkrun.observers"
#: The name of an operation opened without one (its root span is ``sparkrun.pipeline``).
DEFAULT_OPERATION_NAME = "pipeline"

_P = ParamSpec("_P")
_T = TypeVar("_T")

_current: contextvars.ContextVar[Operation | None] = contextvars.ContextVar("sparkrun_operation", default=None)


def new_operation_id() -> str:
    """A random 128-bit id as 32 lowercase hex characters (never all zeros)."""
    while True:
        value = secrets.token_hex(16)
        if value != "0" * 32:
            return value


@dataclass(frozen=True, slots=True)
class OperationInfo:
    """What observers learn about an operation when it starts."""

    operation_id: str
    name: str
    started_at: float
    #: Set in the info given to ``operation_finished``: when the operation ended (Unix seconds).
    finished_at: float | None = None


class EventProcessor(Protocol):
    """A step every event (and the outcome's error) passes through before anyone sees it.

    Processors run in order, as a chain: each gets what the previous one
    returned. The daemon's workers use one to redact secrets; a processor
    that changes nothing returns its input.
    """

    def __call__(self, event: Event) -> Event: ...

    def error(self, error: BaseException | None) -> BaseException | None: ...


class OperationContext(Protocol):
    """What an operation needs from the context it runs in (``SparkrunContext`` is one)."""

    events: Subscriber | None
    observers: list[OperationObserver]

    def push_operation(self, operation: Operation) -> None: ...

    def pop_operation(self, operation: Operation) -> None: ...


class OperationObserver(Protocol):
    """An advisory consumer of every event of the operations it observes.

    Observers run synchronously inside delivery and must return promptly; an
    exception they raise is logged and never reaches the operation. Subclass
    this protocol to inherit no-op defaults for the calls you do not need.
    """

    def operation_started(self, info: OperationInfo) -> None: ...

    def on_event(self, info: OperationInfo, event: Event) -> None: ...

    def operation_finished(self, info: OperationInfo, outcome: Outcome, error: BaseException | None) -> None: ...


#: Observers of every operation of the process (``add_observer``, the ``sparkrun.observers`` entry points).
_process_observers: Registry[OperationObserver] = Registry(entry_points=OBSERVER_ENTRY_POINT_GROUP)


def add_observer(observer: OperationObserver) -> None:
    """Observe every operation started from now on, process-wide."""
    _process_observers.add(observer)


def remove_observer(observer: OperationObserver) -> None:
    """Stop observing operations started from now on; unknown observers are ignored."""
    _process_observers.remove(observer)


class Operation:
    """The state of one operation. Create it through :func:`operation_scope`."""

    __slots__ = (
        "_cancel",
        "_delivering",
        "_lock",
        "_observers",
        "_subscriber",
        "context",
        "error",
        "info",
        "outcome",
        "processors",
    )

    def __init__(
        self,
        name: str,
        *,
        subscriber: Subscriber | None = None,
        observers: Iterable[OperationObserver] = (),
        context: OperationContext | None = None,
        operation_id: str | None = None,
        processors: Iterable[EventProcessor] = (),
    ) -> None:
        if operation_id is not None and not _is_operation_id(operation_id):
            raise ValueError(f"operation_id is {operation_id!r}; it must be 32 lowercase hex characters, not all zero")
        self.info = OperationInfo(operation_id or new_operation_id(), check_text("operation name", name), time.time())
        self.context = context
        self.outcome: Outcome | None = None
        self.error: BaseException | None = None
        self._subscriber = subscriber
        self._observers = tuple(observers)
        self._lock = threading.Lock()
        self._delivering: int | None = None
        self._cancel = threading.Event()
        #: The chain every event and the outcome's error pass through before anyone sees them.
        self.processors = tuple(processors)

    def __repr__(self) -> str:
        return f"<Operation {self.info.name} {self.info.operation_id} outcome={self.outcome}>"

    @property
    def operation_id(self) -> str:
        return self.info.operation_id

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def has_subscribers(self) -> bool:
        """Whether anything (primary subscriber or observer) receives this operation's events."""
        return self._subscriber is not None or bool(self._observers)

    # -- cancellation -------------------------------------------------------------

    def cancel(self) -> None:
        """Ask the operation's work to stop at its next cancellation check."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def raise_if_cancelled(self) -> None:
        """Raise :class:`OperationCancelled` if cancellation was requested."""
        if self._cancel.is_set():
            raise OperationCancelled(f"operation {self.info.name} ({self.info.operation_id}) was cancelled")

    # -- delivery -----------------------------------------------------------------

    def deliver(self, event: Event) -> bool:
        """Hand ``event`` to the subscriber, then to each observer, one event at a time.

        Returns ``False`` (and delivers nothing) when called from inside one of
        this operation's own callbacks, which is how callback-generated
        feedback is kept from being delivered recursively.
        """
        ident = threading.get_ident()
        if self._delivering == ident:
            return False
        with self._lock:
            self._delivering = ident
            try:
                for processor in self.processors:
                    event = processor(event)
                subscriber = self._subscriber
                if subscriber is not None:
                    try:
                        subscriber(event)
                    except Exception:
                        _log.exception("event subscriber of operation %s failed", self.info.operation_id)
                for observer in self._observers:
                    try:
                        observer.on_event(self.info, event)
                    except Exception:
                        _log.exception("observer %r of operation %s failed", observer, self.info.operation_id)
            finally:
                self._delivering = None
        return True

    def _notify(self, call: Callable[[OperationObserver], object]) -> None:
        with self._lock:
            self._delivering = threading.get_ident()
            try:
                for observer in self._observers:
                    try:
                        call(observer)
                    except Exception:
                        _log.exception("observer %r of operation %s failed", observer, self.info.operation_id)
            finally:
                self._delivering = None

    def _start(self) -> None:
        self._notify(lambda observer: observer.operation_started(self.info))

    def _finish(self, outcome: Outcome, error: BaseException | None) -> None:
        self.outcome, self.error = outcome, error
        self.info = replace(self.info, finished_at=time.time())
        observed = error
        for processor in self.processors:
            observed = processor.error(observed)
        self._notify(lambda observer: observer.operation_finished(self.info, outcome, observed))


_process_default: Operation | None = None


def current_operation() -> Operation | None:
    """The operation of the calling context, else the process default (see :func:`bind_process_default`)."""
    return _current.get() or _process_default


def bind_process_default(operation: Operation | None) -> None:
    """Make ``operation`` current wherever no context says otherwise, for the whole process.

    Only for processes that run a single operation (daemon workers): plain
    threads a legacy plugin starts without context then still reach the
    operation through the logging bridge.
    """
    global _process_default
    _process_default = operation


def _is_operation_id(value: str) -> bool:
    return len(value) == 32 and value != "0" * 32 and all(c in "0123456789abcdef" for c in value)


def _outcome_of(error: BaseException) -> Outcome:
    return "cancelled" if isinstance(error, (OperationCancelled, KeyboardInterrupt)) else "failed"


@contextmanager
def operation_scope(
    sctx: OperationContext | None = None,
    *,
    name: str = DEFAULT_OPERATION_NAME,
    observers: Iterable[OperationObserver] = (),
    operation_id: str | None = None,
    processors: Iterable[EventProcessor] = (),
) -> Iterator[Operation]:
    """Run the enclosed block as one operation and record its outcome.

    This is the boundary every API call uses; custom pipelines and tests use
    it too (``operation_scope(sctx)`` names the operation ``pipeline``).
    Inside an operation of the same context the scope joins the
    running operation instead of nesting a new one, so a pipeline that wraps
    several API calls reports as one operation. Events go to ``sctx.events``
    and to the observers of the scope, of ``sctx.observers`` and of the
    process (see :func:`add_observer` and the ``sparkrun.observers`` entry
    point group). ``operation_id`` is for callers that announced the id before
    the work started (the daemon returns it when a job is submitted);
    ``processors`` is the chain events and the outcome pass through first
    (see :class:`EventProcessor`).
    """
    running = _current.get()
    if running is not None and (sctx is None or running.context is sctx):
        yield running
        return
    process_wide = _process_observers.items()
    context_observers = tuple(sctx.observers) if sctx is not None else ()
    operation = Operation(
        name,
        subscriber=sctx.events if sctx is not None else None,
        observers=(*observers, *context_observers, *process_wide),
        context=sctx,
        operation_id=operation_id,
        processors=processors,
    )
    token = _current.set(operation)
    if sctx is not None:
        sctx.push_operation(operation)
    bridged = operation.has_subscribers
    if bridged:
        log_bridge.enable(current_operation)
    try:
        operation._start()
        try:
            yield operation
        except BaseException as error:
            operation._finish(_outcome_of(error), error)
            raise
        operation._finish("succeeded", None)
    finally:
        if bridged:
            log_bridge.disable()
        if sctx is not None:
            sctx.pop_operation(operation)
        _current.reset(token)


def submit(executor: Executor, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
    """``executor.submit`` that runs ``fn`` with the caller's operation context.

    Plain executors start their threads without the caller's context
    variables; this keeps the operation (and so the logging bridge) attached.
    """
    context = contextvars.copy_context()

    def run() -> _T:
        return context.run(fn, *args, **kwargs)

    return executor.submit(run)
