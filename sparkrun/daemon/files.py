"""The daemon's files in ``STATE/daemon/``, and what they prove.

``token`` (mode 0600, kept across restarts so clients keep working),
``daemon.json`` ({url, pid, identity}) while a daemon runs, and ``lock``,
whose flock a daemon holds for its whole life: the lock, not a pid, says
whether a daemon runs (a dead one, even a zombie, holds no lock). Every
unusable file is one error naming it and what to do.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from sparkrun.core.processes import ProcessIdentity
from sparkrun.errors import DaemonError

__all__ = ["DaemonInfo", "DaemonPaths", "ensure_token", "hold_lock", "lock_held", "read_info", "read_token"]


@dataclass(frozen=True)
class DaemonPaths:
    state_dir: Path

    @property
    def directory(self) -> Path:
        return self.state_dir / "daemon"

    @property
    def token(self) -> Path:
        return self.directory / "token"

    @property
    def info(self) -> Path:
        return self.directory / "daemon.json"

    @property
    def lock(self) -> Path:
        return self.directory / "lock"

    @property
    def journal(self) -> Path:
        return self.directory / "journal.sqlite3"

    @property
    def log(self) -> Path:
        return self.directory / "daemon.log"


@dataclass(frozen=True)
class DaemonInfo:
    """What ``daemon.json`` says about the running daemon."""

    url: str
    pid: int
    identity: ProcessIdentity | None


def read_token(paths: DaemonPaths) -> str:
    """The daemon's bearer token; every unusable token file is a one-line error naming it."""
    path = paths.token
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise DaemonError(f"no daemon token; start the daemon first (path={path})") from None
    except IsADirectoryError:
        raise DaemonError(f"the token path is a directory (path={path}); remove it and start the daemon") from None
    except OSError as error:
        raise DaemonError(f"cannot read the daemon token (path={path}, {error.strerror})") from None
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError:
        token = ""
    if not token or any(c.isspace() for c in token) or len(token) > 512:
        raise DaemonError(
            f"the daemon token file is empty or not a token (path={path}); "
            "delete it and restart the daemon to make a new one"
        )
    return token


def ensure_token(paths: DaemonPaths) -> str:
    if paths.token.exists() or paths.token.is_symlink():
        token = read_token(paths)
        os.chmod(paths.token, 0o600)
        return token
    token = secrets.token_urlsafe(32)
    descriptor = os.open(paths.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(token + "\n")
    return token


def read_info(paths: DaemonPaths) -> DaemonInfo | None:
    """``daemon.json`` of the daemon of this state, None if there is none; malformed is a clear error."""
    path = paths.info
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        data = None
    url, pid = (data.get("url"), data.get("pid")) if isinstance(data, dict) else (None, None)
    if not isinstance(url, str) or not url.startswith("http") or type(pid) is not int or pid <= 1:
        raise DaemonError(
            f"the daemon record is malformed (path={path}, expected {{url, pid}}); "
            "if no daemon runs, `sparkrun daemon stop` removes it"
        )
    return DaemonInfo(url, pid, ProcessIdentity.from_json(data.get("identity")))


def lock_held(paths: DaemonPaths) -> bool:
    """Whether a live daemon holds this state directory's lock (a dead one cannot)."""
    try:
        handle = open(paths.lock, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return False
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def hold_lock(paths: DaemonPaths) -> IO[str]:
    """Take the daemon's lock for this process's lifetime, or say which daemon holds it."""
    if paths.lock.is_dir():
        raise DaemonError(f"the daemon lock path is a directory (path={paths.lock}); remove it")
    handle = open(paths.lock, "a+", encoding="utf-8")  # noqa: SIM115 - held for the daemon's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        try:
            running = read_info(paths)
        except DaemonError:
            running = None
        raise DaemonError(
            f"a daemon already runs for this state directory (state_dir={paths.state_dir}, "
            f"pid={running.pid if running else '?'}, url={running.url if running else '?'})"
        ) from None
    return handle
