"""Running the daemon: one per state directory, loopback by default, token auth.

It takes the state directory's lock and token (:mod:`sparkrun.daemon.files`),
binds its port itself (so a busy port is one clear error), opens the journal,
recovers what a previous daemon left, and serves the HTTP API with uvicorn on
connections that must send their headers in time, within a connection cap
sized to the process's open-file limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
import logging
import os
import resource
import signal
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkrun.core.processes import ProcessIdentity
from sparkrun.daemon.files import DaemonPaths, ensure_token, hold_lock
from sparkrun.daemon.log_limits import RateLimitedLog
from sparkrun.errors import DaemonError

__all__ = ["ServeOptions", "serve"]

_log = logging.getLogger(__name__)


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
    max_connections: int = 512
    header_timeout: float = 10.0
    body_timeout: float = 10.0
    keepalive_seconds: float = 15.0
    plugins: tuple[str, ...] = ()
    metrics: bool = True
    #: Where the console links a trace: {"Jaeger": base URL, "Tempo": Grafana base URL}.
    trace_links: tuple[tuple[str, str], ...] = ()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a busy port is one clear error rather than a server traceback."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as error:
        raise DaemonError(f"cannot resolve the address to listen on (host={host}, {error.strerror})") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(256)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise DaemonError(
                f"the port is already in use (host={host}, port={port}); "
                "choose another with --port, or stop what listens there"
            ) from None
        raise DaemonError(f"cannot listen (host={host}, port={port}, {error.strerror})") from None
    sock.setblocking(False)
    return sock


def _raise_file_limit() -> int:
    """Use the hard limit on open files (clients, streams and workers all need descriptors)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


def _loop_errors(log: RateLimitedLog) -> Callable[[asyncio.AbstractEventLoop, dict[str, Any]], None]:
    """The event loop's exception handler: one line per kind of error a minute, not a traceback each time."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        kind = f"{context.get('message', 'error')}: {type(error).__name__ if error else ''}"
        log(logging.ERROR, kind, f"{kind} {error or ''}".strip())

    return handle


def _connection_budget(options: ServeOptions, file_limit: int) -> int:
    # Keep descriptors for the journal, worker pipes (3 per worker) and the files requests read.
    reserve = 64 + 4 * options.max_workers
    return max(8, min(options.max_connections, file_limit - reserve))


async def _serve(
    options: ServeOptions, paths: DaemonPaths, token: str, on_listening: Callable[[str], None] | None
) -> None:
    import uvicorn

    from sparkrun.daemon.app import DaemonSettings, StreamSlots, create_app
    from sparkrun.daemon.http_protocol import GuardedH11Protocol
    from sparkrun.daemon.jobs import JobManager
    from sparkrun.daemon.journal import Journal
    from sparkrun.daemon.operations import load_plugins

    loop = asyncio.get_running_loop()
    loop.set_exception_handler(_loop_errors(RateLimitedLog(_log)))
    file_limit = _raise_file_limit()
    sock = _bind(options.host, options.port)
    load_plugins(options.plugins)
    journal = Journal(paths.journal, max_events=options.max_events, max_event_bytes=options.max_event_bytes)
    manager = JobManager(journal, paths.state_dir, max_workers=options.max_workers, plugins=list(options.plugins))
    lost = manager.recover()
    if lost:
        _log.warning("marked %d unfinished job(s) of a previous daemon as lost", len(lost))
    journal.prune()
    settings = DaemonSettings(
        token=token,
        max_streams=options.max_streams,
        keepalive_seconds=options.keepalive_seconds,
        body_timeout=options.body_timeout,
        trace_links=dict(options.trace_links),
    )
    slots = StreamSlots()
    render = None
    if options.metrics:
        from sparkrun.daemon.metrics import DaemonMetrics

        daemon_metrics = DaemonMetrics(journal, lambda: slots.active)
        manager.observers.append(daemon_metrics)
        render = daemon_metrics.render
    header_timeout, max_connections = options.header_timeout, _connection_budget(options, file_limit)

    class Protocol(GuardedH11Protocol):
        """uvicorn takes the HTTP protocol as a class: this one carries the daemon's limits."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, header_timeout=header_timeout, max_connections=max_connections, **kwargs)

    config = uvicorn.Config(
        create_app(manager, settings, slots=slots, metrics=render),
        http=Protocol,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    server = _uvicorn_server(config)

    async def stop() -> None:
        await manager.shutdown()  # jobs end first, so open streams get their end event and close
        server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: loop.create_task(stop()))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                await task
                raise DaemonError(f"the daemon could not listen (host={options.host}, port={options.port})")
            await asyncio.sleep(0.02)
        host, port = sock.getsockname()[:2]
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        identity = ProcessIdentity.of(os.getpid(), with_cmdline=True)
        record = {"url": url, "pid": os.getpid(), "identity": identity.to_json()}
        paths.info.write_text(json.dumps(record), encoding="utf-8")
        if on_listening is not None:
            on_listening(url)
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
        def capture_signals(self) -> Iterator[None]:
            yield

    return Server(config)


def serve(options: ServeOptions, *, on_listening: Callable[[str], None] | None = None) -> None:
    """Run the daemon in the foreground until SIGINT/SIGTERM; ``on_listening`` gets its URL once it answers."""
    if not _is_loopback(options.host):
        if not options.allow_remote:
            raise DaemonError(
                f"refusing to listen on a non-loopback address (host={options.host}); "
                "pass --allow-remote to expose the daemon beyond this machine"
            )
        _log.warning("listening on %s: the daemon is reachable from other machines; guard its token", options.host)
    paths = DaemonPaths(options.state_dir)
    try:
        paths.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(paths.directory, 0o700)
    except OSError as error:
        raise DaemonError(f"cannot use the daemon directory (path={paths.directory}, {error.strerror})") from None
    lock = hold_lock(paths)
    try:
        token = ensure_token(paths)
        asyncio.run(_serve(options, paths, token, on_listening))
    finally:
        with contextlib.suppress(OSError):
            lock.close()
