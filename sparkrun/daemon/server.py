"""Running the daemon: one per state directory, loopback by default, token auth.

``STATE/daemon/`` holds the ``token`` (mode 0600, kept across restarts so
clients keep working), ``daemon.json`` ({url, pid}) while it runs, a lock
file that keeps a second daemon off the same state, the SQLite journal and
the workers' logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import secrets
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sparkrun.errors import DaemonError

__all__ = ["DaemonPaths", "ServeOptions", "read_token", "serve"]

_log = logging.getLogger(__name__)


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


@dataclass(frozen=True)
class ServeOptions:
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 8765
    allow_remote: bool = False
    max_events: int = 10_000
    max_event_bytes: int = 16 * 2**20
    max_workers: int = 4
    max_streams: int = 64
    keepalive_seconds: float = 15.0
    plugins: tuple[str, ...] = ()
    metrics: bool = True


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(paths: DaemonPaths) -> str:
    try:
        return paths.token.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise DaemonError(f"no daemon token; start the daemon first (path={paths.token})") from None


def _ensure_token(paths: DaemonPaths) -> str:
    if paths.token.exists():
        os.chmod(paths.token, 0o600)
        return read_token(paths)
    token = secrets.token_urlsafe(32)
    descriptor = os.open(paths.token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        file.write(token + "\n")
    return token


def _lock(paths: DaemonPaths) -> IO[str]:
    handle = open(paths.lock, "a+", encoding="utf-8")  # noqa: SIM115 - held for the daemon's lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        try:
            running = json.loads(paths.info.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            running = {}
        raise DaemonError(
            f"a daemon already runs for this state directory (state_dir={paths.state_dir}, "
            f"pid={running.get('pid', '?')}, url={running.get('url', '?')})"
        ) from None
    return handle


async def _serve(options: ServeOptions, paths: DaemonPaths, token: str) -> None:
    import uvicorn

    from sparkrun.daemon.app import DaemonSettings, StreamSlots, create_app
    from sparkrun.daemon.jobs import JobManager
    from sparkrun.daemon.journal import Journal
    from sparkrun.daemon.operations import load_plugins

    load_plugins(options.plugins)
    journal = Journal(paths.journal, max_events=options.max_events, max_event_bytes=options.max_event_bytes)
    manager = JobManager(journal, paths.state_dir, max_workers=options.max_workers, plugins=list(options.plugins))
    lost = manager.recover()
    if lost:
        _log.warning("marked %d unfinished job(s) of a previous daemon as lost", len(lost))
    journal.prune()
    settings = DaemonSettings(token=token, max_streams=options.max_streams, keepalive_seconds=options.keepalive_seconds)
    slots = StreamSlots()
    render = None
    if options.metrics:
        from otel.prometheus import DaemonMetrics

        daemon_metrics = DaemonMetrics(journal, lambda: slots.active)
        manager.observers.append(daemon_metrics)
        render = daemon_metrics.render
    config = uvicorn.Config(
        create_app(manager, settings, slots=slots, metrics=render),
        host=options.host,
        port=options.port,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    server = _uvicorn_server(config)
    loop = asyncio.get_running_loop()

    async def stop() -> None:
        await manager.shutdown()  # jobs end first, so open streams get their end event and close
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: loop.create_task(stop()))
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            if task.done():
                await task
                raise DaemonError(f"the daemon could not listen (host={options.host}, port={options.port})")
            await asyncio.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://{options.host}:{port}"
        paths.info.write_text(json.dumps({"url": url, "pid": os.getpid()}), encoding="utf-8")
        print(f"sparkrun daemon listening on {url} (pid {os.getpid()})", flush=True)
        await task
    finally:
        await manager.shutdown()
        journal.close()
        paths.info.unlink(missing_ok=True)


def _uvicorn_server(config: Any) -> Any:
    """uvicorn's server, minus its signal handling: it re-raises the signal after
    shutting down, which would kill the daemon before it stops its workers."""
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[no-untyped-def, override]
            yield

    return Server(config)


def serve(options: ServeOptions) -> None:
    """Run the daemon in the foreground until SIGINT/SIGTERM."""
    if not _is_loopback(options.host):
        if not options.allow_remote:
            raise DaemonError(
                f"refusing to listen on a non-loopback address (host={options.host}); "
                "pass --allow-remote to expose the daemon beyond this machine"
            )
        _log.warning("listening on %s: the daemon is reachable from other machines; guard its token", options.host)
    paths = DaemonPaths(options.state_dir)
    paths.directory.mkdir(parents=True, exist_ok=True)
    os.chmod(paths.directory, 0o700)
    lock = _lock(paths)
    try:
        token = _ensure_token(paths)
        asyncio.run(_serve(options, paths, token))
    finally:
        with contextlib.suppress(OSError):
            lock.close()


def daemon_info(paths: DaemonPaths) -> dict[str, Any] | None:
    """``daemon.json`` of the daemon running for this state, if any."""
    try:
        return json.loads(paths.info.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
