"""Secret redaction for everything that leaves an operation.

A secret answered to a prompt must never reach a journal, a log, a trace or a
metric. :class:`Redactor` replaces each known secret with ``[redacted]``: in
event and result values (:meth:`Redactor.value`), in text, in a byte stream cut
into arbitrary chunks (:class:`StreamRedactor`, so a secret split across reads
or holding a newline is still caught), and in an operation's outcome
(:meth:`Redactor.error`, which gives observers a :class:`ReportedError`
instead of the exception itself). A redactor is an event processor of the
operation it guards (see ``operation_scope(processors=...)``). Besides the secret itself, its JSON-escaped
and ``repr`` forms are replaced, since a plugin may print it that way.
"""

from __future__ import annotations

import json
import threading
import traceback
from collections.abc import Iterable
from typing import Any

from sparkrun.core.events import Event
from sparkrun.errors import ReportedError, error_type_name

__all__ = ["REDACTED", "Redactor", "StreamRedactor", "redactor_of"]

REDACTED = "[redacted]"


class Redactor:
    """Replaces every secret it was given; safe to share between threads."""

    def __init__(self) -> None:
        self._patterns: tuple[str, ...] = ()
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        """Redact ``secret`` (and its escaped forms) from now on."""
        if not isinstance(secret, str) or not secret:
            return
        forms = {secret, json.dumps(secret)[1:-1], repr(secret)[1:-1]}
        with self._lock:
            # Longest first, so a secret containing another is replaced whole.
            self._patterns = tuple(sorted(set(self._patterns) | forms, key=len, reverse=True))

    def __bool__(self) -> bool:
        return bool(self._patterns)

    @property
    def longest(self) -> int:
        """Length of the longest pattern (how much of a stream must be held back)."""
        return len(self._patterns[0]) if self._patterns else 0

    def text(self, value: str) -> str:
        for pattern in self._patterns:
            if pattern in value:
                value = value.replace(pattern, REDACTED)
        return value

    def __call__(self, event: Event) -> Event:
        """As an event processor of an operation: the event without secrets."""
        if not self._patterns:
            return event
        redacted: Event = self.value(event)  # the same event, its strings (keys too) without secrets
        return redacted

    def value(self, value: Any) -> Any:
        """``value`` with every secret replaced, inside dicts (keys too) and lists; as is without secrets."""
        if not self._patterns:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(key) if isinstance(key, str) else key: self.value(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.value(item) for item in value]
        return value

    def error(self, error: BaseException | None) -> BaseException | None:
        """The exception to show observers: itself without secrets, else a :class:`ReportedError`."""
        if error is None or not self._patterns:
            return error
        try:
            stacktrace = "".join(traceback.format_exception(error))
        except Exception:
            stacktrace = ""
        try:
            message = str(error)
        except Exception:
            message = ""
        return ReportedError(self.text(error_type_name(error)), self.text(message), self.text(stacktrace))


class StreamRedactor:
    """Redacts text that arrives in pieces: holds back just enough to catch a secret cut in two."""

    def __init__(self, redactor: Redactor) -> None:
        self._redactor = redactor
        self._carry = ""

    def feed(self, piece: str) -> str:
        """The redacted text that is safe to write now."""
        text = self._redactor.text(self._carry + piece)
        hold = self._redactor.longest - 1
        if hold <= 0:
            self._carry = ""
            return text
        self._carry = text[-hold:]
        return text[:-hold]

    def flush(self) -> str:
        """The held-back rest, at the end of the stream."""
        rest, self._carry = self._redactor.text(self._carry), ""
        return rest


def redactor_of(processors: Iterable[object]) -> Redactor:
    """The redactor among an operation's processors, else a new one (with no secrets it redacts nothing)."""
    found = next((p for p in processors if isinstance(p, Redactor)), None)
    return found if found is not None else Redactor()  # not ``or``: a redactor without secrets yet is falsy
