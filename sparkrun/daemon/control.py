"""Starting and stopping a background daemon from another process.

Whether a daemon runs is decided by its lock (held for its whole life, gone
with it even while it is a zombie), never by a pid. A ``daemon.json`` left by
a daemon that died is stale: it is reported and removed, and its pid is never
signalled. A live daemon is sent SIGTERM only after its recorded identity
(pid, start time, command line) is proven to still be the process holding
the lock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

from sparkrun.daemon.files import DaemonInfo, DaemonPaths, lock_held, read_info
from sparkrun.errors import DaemonError

__all__ = ["start", "stop"]


def _last_line(path: os.PathLike[str]) -> str:
    try:
        with open(path, "rb") as file:
            file.seek(max(0, os.fstat(file.fileno()).st_size - 4096))
            lines = [line for line in file.read().decode(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


def _forget_stale(paths: DaemonPaths) -> bool:
    """Remove ``daemon.json`` if no daemon holds the lock; returns whether there was one."""
    if paths.info.exists() and not lock_held(paths):
        paths.info.unlink(missing_ok=True)
        return True
    return False


def start(paths: DaemonPaths, serve_args: Sequence[str], *, timeout: float) -> tuple[DaemonInfo, bool]:
    """Start ``sparkrun daemon serve`` in the background; returns its record and whether a stale one was removed."""
    if lock_held(paths):
        try:
            running = read_info(paths)
        except DaemonError:
            running = None
        where = f", pid={running.pid}, url={running.url}" if running else ""
        raise DaemonError(f"a daemon already runs for this state directory (state_dir={paths.state_dir}{where})")
    stale = _forget_stale(paths)
    paths.directory.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "sparkrun", "daemon", "serve", "--state-dir", str(paths.state_dir), *serve_args]
    with open(paths.log, "ab") as log:
        process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = _last_line(paths.log)
            raise DaemonError(
                f"the daemon exited with code {process.returncode}"
                + (f": {said}" if said else "")
                + f" (log={paths.log})"
            )
        info = read_info(paths)
        if info is not None and info.pid == process.pid:
            return info, stale
        time.sleep(0.1)
    raise DaemonError(f"the daemon did not start within {timeout:g} s (log={paths.log})")


def stop(paths: DaemonPaths, *, timeout: float = 20.0) -> str:
    """Stop the daemon of ``paths`` if one runs; idempotent. Returns what happened, in a sentence."""
    if not lock_held(paths):
        if _forget_stale(paths):
            return "the daemon is not running; removed the record it left behind"
        return "the daemon is not running"
    try:
        info = read_info(paths)
    except DaemonError:
        info = None
    identity = info.identity if info is not None else None
    if info is None or identity is None or not identity.matches():
        raise DaemonError(
            f"a daemon holds the lock but its record does not match it (path={paths.info}); "
            "stop that process yourself (see `fuser` on the lock file)"
        )
    if info.pid <= 1 or info.pid in (os.getpid(), os.getpgrp()):
        raise DaemonError(f"refusing to signal this pid (pid={info.pid})")
    os.kill(info.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and lock_held(paths):
        time.sleep(0.1)
    if lock_held(paths):
        raise DaemonError(f"the daemon did not stop within {timeout:g} s (pid={info.pid}, log={paths.log})")
    paths.info.unlink(missing_ok=True)
    return f"daemon stopped (pid {info.pid})"
