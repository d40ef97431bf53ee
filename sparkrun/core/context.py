"""The application context (``sctx``) that callers hand to sparkrun."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from sparkrun.config import Config
from sparkrun.core.operation import Operation, OperationObserver, Subscriber, current_operation

__all__ = ["SparkrunContext"]


@dataclass(eq=False)
class SparkrunContext:
    """Configuration plus where events go.

    ``events`` is the primary subscriber: a callable taking each event dict
    (``SimpleQueue.put`` is the usual choice). It is read when an operation
    starts. ``observers`` are advisory consumers added to every operation of
    this context.
    """

    config: Config
    events: Subscriber | None = None
    observers: list[OperationObserver] = field(default_factory=list)
    _active: list[Operation] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def push_operation(self, operation: Operation) -> None:
        """Record ``operation`` as running in this context (called by ``operation_scope``)."""
        with self._lock:
            self._active.append(operation)

    def pop_operation(self, operation: Operation) -> None:
        """Forget ``operation`` once it has ended."""
        with self._lock:
            self._active.remove(operation)

    @property
    def operation(self) -> Operation | None:
        """The running operation of this context.

        In the calling context that is its own operation; elsewhere (for
        example a plain thread started without context) it is the most
        recently started operation of this context that is still running.
        """
        running = current_operation()
        if running is not None and running.context is self:
            return running
        with self._lock:
            return self._active[-1] if self._active else None
