"""The daemon's HTTP/1.1 connections: uvicorn's h11 protocol with two guards added.

A client that opens a connection and never finishes its request headers
would otherwise hold it (and a file descriptor) forever, and enough of them
exhaust the daemon. So each connection must deliver a request's headers
within ``header_timeout`` seconds (after it opens, and again after each
response on a kept-alive connection), and connections beyond
``max_connections`` are closed as soon as they are accepted. Slow bodies are
bounded by the application (see ``DaemonSettings.body_timeout``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from sparkrun.daemon.log_limits import RateLimitedLog

__all__ = ["GuardedH11Protocol"]

_limited = RateLimitedLog(logging.getLogger(__name__))


class GuardedH11Protocol(H11Protocol):
    """h11 connections with a deadline for request headers and a cap on open connections."""

    def __init__(self, *args: Any, header_timeout: float = 10.0, max_connections: int = 512, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.header_timeout = header_timeout
        self.max_connections = max_connections
        self._header_timer: asyncio.TimerHandle | None = None

    # uvicorn's H11Protocol narrows asyncio.Protocol's parameter to a Transport (and ignores the same
    # error itself); this override keeps uvicorn's signature, so it inherits the mismatch.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            _limited(
                logging.WARNING,
                "refused",
                f"refusing connections: {len(self.connections)} are open (limit={self.max_connections})",
            )
            transport.close()
            return
        self._arm()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:  # a request's headers arrived
            self._disarm()

    def on_response_complete(self) -> None:
        cycle = self.cycle
        super().on_response_complete()
        if self.cycle is cycle and not self.transport.is_closing():  # waiting for the next request's headers
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_late)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()
