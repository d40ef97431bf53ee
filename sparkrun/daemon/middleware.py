"""The daemon's ASGI middleware: the bearer token, and failures that must not flood the log."""

from __future__ import annotations

import contextlib
import hmac
import logging
from http.cookies import CookieError, SimpleCookie

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sparkrun.daemon.console.sessions import COOKIE, Sessions
from sparkrun.daemon.http_input import error_response
from sparkrun.daemon.log_limits import RateLimitedLog

__all__ = ["BearerAuth", "Contained"]

_limited = RateLimitedLog(logging.getLogger(__name__))


class BearerAuth:
    """Pure ASGI middleware: rejects requests without the daemon's token (health excepted).

    The console (``/ui/``) checks its own session cookie; with that cookie a
    signed-in page may also read (GET only, so no forged request changes
    anything) the ``/v1/`` API, which is where its live streams come from.
    """

    def __init__(self, app: ASGIApp, token: str, sessions: Sessions | None = None) -> None:
        self.app, self._token, self._sessions = app, token.encode(), sessions

    def _signed_in(self, scope: Scope) -> bool:
        if self._sessions is None or scope.get("method") not in ("GET", "HEAD"):
            return False
        cookies = SimpleCookie()
        with contextlib.suppress(CookieError):
            cookies.load(dict(scope["headers"]).get(b"cookie", b"").decode("latin-1"))
        morsel = cookies.get(COOKIE)
        return morsel is not None and self._sessions.get(morsel.value) is not None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path != "/v1/health" and not path.startswith("/ui"):
            header = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, given = header.partition(b" ")
            if not header and self._signed_in(scope):
                await self.app(scope, receive, send)
                return
            if scheme.lower() != b"bearer" or not given:
                await error_response(401, "missing bearer token (header=Authorization)")(scope, receive, send)
                return
            if not hmac.compare_digest(given.strip(), self._token):
                await error_response(403, "wrong bearer token (header=Authorization)")(scope, receive, send)
                return
        await self.app(scope, receive, send)


class Contained:
    """Outermost middleware: an unexpected failure is a 500, logged once a minute per kind, never a flood."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as error:
            kind = f"{type(error).__name__} at {scope.get('path', '?')}"
            _limited(logging.ERROR, kind, f"request failed: {kind}: {error}", error)
            if not started and scope["type"] == "http":
                await error_response(500, "internal error; see the daemon log")(scope, receive, send)
