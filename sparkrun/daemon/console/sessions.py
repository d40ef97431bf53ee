"""Console sessions: the token is exchanged once for a random session id, which is all a cookie carries.

Sessions live in the daemon's memory (a restart signs everyone out), expire
after twelve hours, and are bounded in number (the oldest goes first). Each
has its own CSRF token, which every state-changing form must echo.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass

__all__ = ["COOKIE", "Session", "Sessions"]

COOKIE = "sparkrun_session"
_TTL_SECONDS = 12 * 3600
_MAX_SESSIONS = 256


@dataclass(frozen=True)
class Session:
    id: str
    csrf: str
    expires_at: float

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


class Sessions:
    """The signed-in browsers of one daemon."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()
        self._sessions: dict[str, Session] = {}

    def sign_in(self, given: str) -> Session | None:
        """A new session if ``given`` is the daemon's token (compared in constant time), else None."""
        if not given or not hmac.compare_digest(given.strip().encode(), self._token):
            return None
        now = time.time()
        self._sessions = {key: s for key, s in self._sessions.items() if s.expires_at > now}
        while len(self._sessions) >= _MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), now + _TTL_SECONDS)
        self._sessions[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        session = self._sessions.get(session_id or "")
        if session is None or session.expires_at <= time.time():
            return None
        return session

    def sign_out(self, session_id: str) -> None:
        self._sessions.pop(session_id, None)
