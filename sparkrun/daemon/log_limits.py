"""Logging that a hostile client cannot turn into a flood.

The daemon logs failures it cannot prevent (clients that leave mid-request,
exhausted file descriptors, unexpected errors). Each kind is logged at most
once a minute, with a count of what was held back since, and only its first
report carries a traceback.
"""

from __future__ import annotations

import logging
import time

__all__ = ["RateLimitedLog"]


class RateLimitedLog:
    """Logs each kind of message at most once per ``interval`` seconds."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0) -> None:
        self._logger = logger
        self._interval = interval
        self._reported: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, level: int, kind: str, message: str, error: BaseException | None = None) -> None:
        now = time.monotonic()
        last = self._reported.get(kind)
        if last is not None and now - last < self._interval:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        self._reported[kind] = now
        held = self._held.pop(kind, 0)
        note = f" ({held} more since the last report)" if held else ""
        first_time = last is None and error is not None
        self._logger.log(level, "%s%s", message, note, exc_info=error if first_time else None)
