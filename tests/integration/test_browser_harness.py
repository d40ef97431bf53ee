"""The browser harness drives a real headless Chromium, and each of its helpers shows what it claims.

A small site on loopback stands in for the web console: a page under ``script-src 'self'`` whose
external script opens an EventSource to a stream that sends an event with an id every 100 ms.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.browser import Browser, BrowserError

pytestmark = pytest.mark.integration

_HEAD = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>harness</title>
<script src="/app.js" defer></script>
</head>
"""
PAGE = (
    _HEAD
    + """<body>
<h1>Browser harness</h1>
<p>Script: <span id="status">not run</span></p>
<p>Stream: <span id="connection">connecting</span>, last event <span id="last-id">none</span></p>
</body>
</html>
"""
)
INLINE_PAGE = (
    _HEAD
    + """<body>
<p>Script: <span id="status">not run</span></p>
<script>document.body.dataset.inline = "ran";</script>
</body>
</html>
"""
)
SCRIPT = """"use strict";
const received = [];
let errors = 0;
let lastIdAtError = null;
document.getElementById("status").textContent = "script ran";
const source = new EventSource("/events");
source.addEventListener("open", () => {
  const connection = document.getElementById("connection");
  if (connection) connection.textContent = "open";
});
source.addEventListener("message", (event) => {
  received.push(Number(event.lastEventId));
  const lastId = document.getElementById("last-id");
  if (lastId) lastId.textContent = event.lastEventId;
});
source.addEventListener("error", () => {
  errors += 1;
  if (lastIdAtError === null) lastIdAtError = source.readyState === EventSource.OPEN ? null : received.at(-1);
});
window.streamState = () => ({received, errors, lastIdAtError, readyState: source.readyState, online: navigator.onLine});
"""
SESSION_COOKIE = "harness-session=opaque; Path=/; HttpOnly; SameSite=Strict"


@dataclass
class Site:
    """The running site: its URL, and the headers of every request its event stream received."""

    url: str
    stream_requests: list[dict[str, str]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    server: Any
    timeout = 5  # a connection the browser forgot cannot hold a thread forever

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: a test's output is no place for an access log."""

    def do_GET(self) -> None:
        site: Site = self.server.site
        if self.path == "/":
            self._send(PAGE, "text/html; charset=utf-8", ("Set-Cookie", SESSION_COOKIE))
        elif self.path == "/inline":
            self._send(INLINE_PAGE, "text/html; charset=utf-8")
        elif self.path == "/app.js":
            self._send(SCRIPT, "text/javascript; charset=utf-8")
        elif self.path == "/events":
            site.stream_requests.append(dict(self.headers.items()))
            self._stream(site, int(self.headers.get("Last-Event-ID") or 0))
        else:
            self.send_error(404)

    def _send(self, body: str, content_type: str, *headers: tuple[str, str]) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Content-Security-Policy", "script-src 'self'")
        self.send_header("Cache-Control", "no-store")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, site: Site, last_id: int) -> None:
        """Events ``last_id + 1``, ``last_id + 2``, ... every 100 ms, until the client or the site goes away."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        try:
            self.wfile.write(b"retry: 200\n\n")  # reconnect quickly: the default is 3 s
            event_id = last_id
            while not site.stop.wait(0.1):
                event_id += 1
                self.wfile.write(f"id: {event_id}\ndata: tick {event_id}\n\n".encode())
        except OSError:
            pass  # the browser went away (or its connection was cut): the stream ends


@pytest.fixture
def site() -> Iterator[Site]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.site = Site(url=f"http://127.0.0.1:{server.server_address[1]}")  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.site  # type: ignore[attr-defined]
    finally:
        server.site.stop.set()  # type: ignore[attr-defined]
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk; fails unless the file starts as a PNG does."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_page_renders_and_its_external_script_runs(browser, site):
    browser.open(f"{site.url}/")

    assert browser.wait_for("#status", text="script ran").text == "script ran"
    assert browser.text_of("h1") == "Browser harness"
    assert 'id="status">script ran<' in browser.page_source()  # the DOM as the script left it
    assert browser.execute("return [window.innerWidth, window.innerHeight]") == [1280, 900]
    assert browser.console_errors() == []


def test_csp_blocks_an_inline_script_and_the_console_log_shows_the_violation(browser, site):
    browser.open(f"{site.url}/inline")
    browser.wait_for("#status", text="script ran")  # 'self' still allows the external script

    assert browser.execute("return document.body.dataset.inline") is None
    violations = [m for m in browser.console_errors() if m.source == "security"]
    assert len(violations) == 1, browser.console_log()
    assert "Content Security Policy" in violations[0].message
    assert "script-src 'self'" in violations[0].message


def test_offline_cuts_the_event_stream_and_online_resumes_it_with_last_event_id(browser, site):
    browser.open(f"{site.url}/")
    browser.wait_until(lambda: len(browser.execute("return streamState().received")) >= 3)

    browser.set_offline(True)
    state = browser.wait_until(
        lambda: (s := browser.execute("return streamState()"))["errors"] >= 1 and s,
        message="the EventSource saw no error after the network was cut",
    )
    assert state["readyState"] == 0  # CONNECTING: the browser keeps retrying by itself
    assert state["online"] is False
    cut_at = state["lastIdAtError"]
    assert len(site.stream_requests) == 1  # no retry reaches the server while offline

    browser.set_offline(False)
    browser.wait_until(lambda: len(site.stream_requests) >= 2, message="the EventSource did not reconnect")
    assert site.stream_requests[0].get("Last-Event-ID") is None
    assert site.stream_requests[1].get("Last-Event-ID") == str(cut_at)

    received = browser.wait_until(
        lambda: (ids := browser.execute("return streamState().received"))[-1] >= cut_at + 3 and ids
    )
    assert received == list(range(1, len(received) + 1))  # resumed where it stopped: no gap, no repeat
    assert browser.wait_for("#connection", text="open")
    assert len([r for r in browser.request_log() if r.url == f"{site.url}/events"]) >= 2


def test_a_screenshot_is_a_png_of_the_viewport(browser, site, screenshot_root):
    browser.open(f"{site.url}/")
    browser.wait_for("#status", text="script ran")

    path = browser.screenshot("harness page")

    assert path.is_file()
    assert path.stat().st_size > 0
    assert path.name == "harness-page.png"
    assert path.is_relative_to(screenshot_root)
    assert _png_size(path) == (1280, 900)


def test_the_phone_browser_has_a_phone_sized_touch_viewport(phone_browser, site):
    phone_browser.open(f"{site.url}/")
    phone_browser.wait_for("#status", text="script ran")

    assert phone_browser.execute("return [window.innerWidth, window.innerHeight]") == [390, 844]
    assert phone_browser.execute("return window.matchMedia('(pointer: coarse)').matches") is True
    assert _png_size(phone_browser.screenshot("phone")) == (390, 844)


def test_cookies_and_request_log_show_what_the_page_did(browser, site):
    browser.open(f"{site.url}/")
    browser.wait_for("#connection", text="open")

    cookies = {cookie["name"]: cookie for cookie in browser.cookies()}
    assert cookies["harness-session"]["value"] == "opaque"
    assert cookies["harness-session"]["httpOnly"] is True
    requests = [(r.method, r.url) for r in browser.request_log()]
    assert ("GET", f"{site.url}/") in requests
    assert ("GET", f"{site.url}/app.js") in requests
    assert ("GET", f"{site.url}/events") in requests
    assert all("opaque" not in url for _, url in requests)  # the check a console test makes for its token


def test_the_browser_reaches_nothing_but_loopback(browser, site):
    browser.open(f"{site.url}/")

    # TEST-NET-1: an address that is never anyone's; no-cors, so only a network error can reject.
    outcome = browser.execute(
        "return fetch('http://192.0.2.1/', {mode: 'no-cors'}).then(() => 'reached', (e) => String(e));"
    )

    assert outcome == "TypeError: Failed to fetch"
    assert "http://192.0.2.1/" in browser.refused_requests


def test_a_browser_that_cannot_start_raises_with_the_binary_and_the_reason(tmp_path):
    missing = tmp_path / "no-chromium"
    with pytest.raises(BrowserError, match=f"{missing} is missing or not executable"):
        Browser(chromium=missing).start()

    broken = tmp_path / "broken-chromium"
    broken.write_text("#!/bin/sh\necho 'cannot open display' >&2\nexit 3\n")
    broken.chmod(0o755)
    with pytest.raises(BrowserError) as raised:
        Browser(chromium=broken).start()
    assert str(raised.value).startswith(f"cannot start headless Chromium ({broken}) through /usr/bin/chromedriver: ")
