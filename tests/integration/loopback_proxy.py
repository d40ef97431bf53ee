"""An HTTP proxy on loopback that forwards to loopback only, and can cut every connection it carries.

The test browser (:mod:`tests.integration.browser`) sends all its traffic through it, for two reasons:

- nothing leaves the machine: a request for any host but ``localhost`` or a loopback address is closed
  without a response (the browser sees a network error) and without a name lookup;
- a test can drop the browser's open connections (:meth:`LoopbackProxy.cut`) the way a lost network
  does. DevTools' offline emulation alone does not: Chromium keeps an EventSource stream that is
  already open flowing, and only fails new requests.

Each forwarded request is sent upstream with ``Connection: close`` and its response is passed on with
``Connection: close``, so one client connection carries one request and a cut drops exactly the
requests in flight. ``CONNECT`` to a loopback port is tunnelled. Stdlib only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import selectors
import socket
import threading
from urllib.parse import urlsplit

__all__ = ["LoopbackProxy"]

_HEADER_LIMIT = 64 * 1024
_CONNECT_TIMEOUT = 5.0
_CHUNK = 64 * 1024
_HOP_BY_HOP = {b"connection", b"proxy-connection", b"keep-alive"}


class LoopbackProxy:
    """A forward HTTP proxy on ``127.0.0.1``; ``with LoopbackProxy() as proxy: ... proxy.url ...``."""

    def __init__(self) -> None:
        self._listener: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self.refused: list[str] = []  # the targets it would not forward, for a test to look at

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``, for Chromium's ``--proxy-server``."""
        if self._listener is None:
            raise RuntimeError("the proxy is not running")
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def start(self) -> LoopbackProxy:
        """Listen on a free loopback port and serve in a background thread."""
        self._listener = socket.create_server(("127.0.0.1", 0))
        thread = threading.Thread(target=self._accept, args=(self._listener,), name="loopback-proxy", daemon=True)
        thread.start()
        self._threads.append(thread)
        return self

    def cut(self) -> int:
        """Drop every open connection, both towards the browser and towards the servers; return how many."""
        with self._lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        return len(sockets)

    def stop(self) -> None:
        """Stop listening and drop what is open; safe to call twice."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        self.cut()
        for thread in self._threads:
            thread.join(timeout=5)
        self._threads.clear()

    def __enter__(self) -> LoopbackProxy:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            thread = threading.Thread(target=self._serve, args=(client,), name="loopback-proxy-conn", daemon=True)
            thread.start()
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)

    def _track(self, sock: socket.socket) -> socket.socket:
        with self._lock:
            self._open.add(sock)
        return sock

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        self._track(client)
        try:
            head, rest = _read_head(client)
            if head is None:
                return
            request_line, *header_lines = head.split(b"\r\n")
            method, target, version = request_line.split(b" ", 2)
            host, port, path = _target(method, target)
            if host is None or not _is_loopback(host):
                self.refused.append(target.decode("latin-1"))
                return  # closed without a response: the browser sees a network error, as for a dead host
            try:
                upstream = self._track(socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT))
            except OSError:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                return
            upstream.settimeout(None)
            if method == b"CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                upstream.sendall(rest)
                _pipe(client, upstream, rewrite_response=False)
                return
            headers = [line for line in header_lines if line.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP]
            upstream.sendall(b"\r\n".join([b" ".join([method, path, version]), *headers, b"Connection: close"]))
            upstream.sendall(b"\r\n\r\n" + rest)
            _pipe(client, upstream, rewrite_response=True)
        except (OSError, ValueError):
            pass  # a cut, a client that went away, or a request that is not HTTP: the connection just ends
        finally:
            for sock in (client, upstream):
                if sock is not None:
                    with self._lock:
                        self._open.discard(sock)
                    sock.close()


def _read_head(sock: socket.socket, limit: int = _HEADER_LIMIT) -> tuple[bytes | None, bytes]:
    """The bytes up to the blank line ending a message's head, and those read after it."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(_CHUNK)
        if not chunk or len(data) > limit:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _target(method: bytes, target: bytes) -> tuple[str | None, int, bytes]:
    """Host, port and origin-form path of a proxy request (``CONNECT host:port`` or ``GET http://...``)."""
    if method == b"CONNECT":
        host, _, port = target.decode("latin-1").rpartition(":")
        return host.strip("[]") or None, int(port), b""
    url = urlsplit(target.decode("latin-1"))
    if url.scheme != "http" or url.hostname is None:
        return None, 0, b""
    path = (url.path or "/") + (f"?{url.query}" if url.query else "")
    return url.hostname, url.port or 80, path.encode("latin-1")


def _is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address; decided without a name lookup."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _pipe(client: socket.socket, upstream: socket.socket, *, rewrite_response: bool) -> None:
    """Copy bytes both ways until either side closes; the response's head says ``Connection: close``."""
    pending = b""  # the start of a response whose head is not complete yet
    with selectors.DefaultSelector() as selector:
        selector.register(client, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, client)
        while True:
            for key, _ in selector.select():
                source: socket.socket = key.fileobj  # type: ignore[assignment]
                chunk = source.recv(_CHUNK)
                if not chunk:
                    return
                if source is upstream and rewrite_response:
                    pending += chunk
                    if b"\r\n\r\n" not in pending and len(pending) < _HEADER_LIMIT:
                        continue
                    chunk, pending, rewrite_response = _close_after(pending), b"", False
                key.data.sendall(chunk)


def _close_after(response: bytes) -> bytes:
    """``response`` with its head's connection headers replaced by ``Connection: close`` (101 untouched)."""
    head, separator, body = response.partition(b"\r\n\r\n")
    status_line, *lines = head.split(b"\r\n")
    if not separator or status_line.split(b" ")[1:2] == [b"101"]:
        return response
    lines = [line for line in lines if line.split(b":", 1)[0].strip().lower() not in _HOP_BY_HOP]
    return b"\r\n".join([status_line, *lines, b"Connection: close"]) + separator + body
