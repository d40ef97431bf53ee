"""Waiting until a workload accepts connections and answers its HTTP check.

Standard library only, and free of syntax newer than Python 3.8 at run time
(annotations are never evaluated): the same code runs on this machine for
local workloads and on remote hosts, where sparkrun sends it over SSH to a
bare ``python3``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

__all__ = ["NotReady", "http_ok", "port_open", "wait_ready"]

_POLL_SECONDS = 0.1


class NotReady(Exception):
    """The workload exited or timed out before it was ready; the message says which."""


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


def port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


def http_ok(address: str, port: int, path: str) -> bool:
    # Imported here: urllib.request pulls in http, email and ssl, which the agent's other requests never need.
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the workload itself, never a proxy
    try:
        with opener.open(f"http://{_url_host(address)}:{port}{path}", timeout=2) as response:
            status: int = response.status
            return 200 <= status < 300
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_ready(
    *,
    address: str,
    port: int,
    http_path: str | None,
    timeout: float,
    exited: Callable[[], str | None],
    on_step: Callable[[int, int, str], None],
) -> None:
    """Return once the port accepts connections and ``http_path`` (if any) answers 2xx.

    ``exited`` returns why the workload is gone (or None while it runs);
    :class:`NotReady` carries that reason, or the timeout and what was still
    awaited.
    """
    total = 2 if http_path else 1
    deadline = time.monotonic() + timeout
    on_step(1, total, f"waiting for port {port}")
    stage = "port"
    while time.monotonic() < deadline:
        reason = exited()
        if reason is not None:
            raise NotReady(reason)
        if stage == "port" and port_open(address, port):
            if http_path is None:
                return
            stage = "http"
            on_step(2, total, f"waiting for HTTP GET {http_path}")
        if stage == "http" and http_ok(address, port, http_path or "/"):
            return
        time.sleep(_POLL_SECONDS)
    waiting = "waiting for the port" if stage == "port" else "failing the HTTP check"
    raise NotReady(
        f"workload not ready within {timeout:g} s, still {waiting} (readiness.timeout={timeout:g}, port={port})"
    )
