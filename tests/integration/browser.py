"""A real headless Chromium, driven through Selenium, for the tests of the web console.

Debian's ``chromium`` and its ``chromedriver`` (``make chromium``) are started with a fresh profile and a
fixed viewport; a page sees what a user's browser would, JavaScript, Content Security Policy and
EventSource included::

    with Browser(PHONE, mobile=True) as browser:
        browser.open(f"{daemon.url}/ui/")
        browser.wait_for("#jobs", text="example-chat")
        browser.screenshot("jobs")
        assert browser.console_errors() == []

The browser talks to loopback only: all its traffic goes through a :class:`LoopbackProxy` of its own,
which forwards to loopback and refuses everything else, and Chrome's own background traffic (updates,
sync, metrics) is switched off. The same proxy lets :meth:`Browser.set_offline` drop open connections.
A browser that cannot start raises :class:`BrowserError` naming the binary and Chromium's reason: the
fixtures turn it into a failure, never a skip.

Selenium is imported when a browser starts, so a missing ``selenium`` fails the tests that need a
browser, not the collection of every integration test.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from tests.integration.loopback_proxy import LoopbackProxy

if TYPE_CHECKING:
    from selenium.webdriver.chrome.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

__all__ = [
    "CHROMEDRIVER",
    "CHROMIUM",
    "DESKTOP",
    "PHONE",
    "SCREENSHOTS_ENV",
    "Browser",
    "BrowserError",
    "ConsoleMessage",
    "Request",
]

#: Debian's ChromeDriver (package ``chromium-driver``).
CHROMEDRIVER = Path("/usr/bin/chromedriver")
#: Debian's Chromium launcher (package ``chromium``); it reads the flags of ``/etc/chromium.d``.
CHROMIUM = Path("/usr/bin/chromium")
#: Viewport sizes in CSS pixels: a laptop, and a phone the size of an iPhone 12-15.
DESKTOP = (1280, 900)
PHONE = (390, 844)
#: Where screenshots go when set; otherwise a temporary directory (the fixtures: one per test session).
SCREENSHOTS_ENV = "SPARKRUN_SCREENSHOTS"

_OPTIONS = (
    "--headless=new",
    "--no-sandbox",  # the tests run as root, where Chromium's sandbox refuses to start
    "--disable-dev-shm-usage",  # a container's /dev/shm is small
    "--disable-gpu",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-component-extensions-with-background-pages",
    "--disable-default-apps",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--metrics-recording-only",  # record, never upload
    "--no-pings",
    "--password-store=basic",
    "--use-mock-keychain",
    "--mute-audio",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,"
    "AutofillServerCommunication,CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions",
    # Loopback too goes through the proxy (Chromium would bypass it for localhost and 127/8 implicitly).
    "--proxy-bypass-list=<-loopback>",
)
_PAGE_LOAD_TIMEOUT = 30.0
_POLL = 0.05

_T = TypeVar("_T")


class BrowserError(RuntimeError):
    """The browser could not start (or a DevTools command failed); the message says which binary and why."""


@dataclass(frozen=True)
class ConsoleMessage:
    """One message of the page's console: ``level`` is ``SEVERE``, ``WARNING``, ``INFO`` or ``DEBUG``.

    ``source`` says where it came from: ``javascript`` (an uncaught error), ``console-api``
    (``console.*``), ``security`` (a Content Security Policy violation), ``network``, ...
    """

    level: str
    source: str
    message: str


@dataclass(frozen=True)
class Request:
    """A request the page made, as DevTools saw it before it was sent (``Network.requestWillBeSent``)."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)


class Browser:
    """Headless Chromium with a fresh profile; a context manager that always quits it.

    ``size`` is the viewport's size in CSS pixels (:data:`DESKTOP`, :data:`PHONE`), at one device pixel
    per CSS pixel, set by ChromeDriver's device emulation: a headless window alone would not go below
    500 pixels wide and keeps room for browser chrome. ``mobile`` emulates a phone as DevTools' device
    mode does: a touch screen, and a page without ``<meta name="viewport">`` laid out 980 pixels wide.
    ``screenshot_dir`` defaults to ``$SPARKRUN_SCREENSHOTS``, else a new temporary directory.
    """

    def __init__(
        self,
        size: tuple[int, int] = DESKTOP,
        *,
        mobile: bool = False,
        screenshot_dir: Path | None = None,
        chromium: Path = CHROMIUM,
        chromedriver: Path = CHROMEDRIVER,
    ) -> None:
        self.size = size
        self.mobile = mobile
        self.chromium = chromium
        self.chromedriver = chromedriver
        self._screenshot_dir = screenshot_dir
        self._driver: WebDriver | None = None
        self._workdir: Path | None = None
        self._console: list[ConsoleMessage] = []
        self._performance: list[dict[str, Any]] = []
        self._network_enabled = False
        self._proxy: LoopbackProxy | None = None

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Browser:
        """Start Chromium; raise :class:`BrowserError` with chromedriver's reason if it cannot."""
        for binary, package in ((self.chromedriver, "chromium-driver"), (self.chromium, "chromium")):
            if not (binary.is_file() and os.access(binary, os.X_OK)):
                raise BrowserError(
                    f"cannot start the browser: {binary} is missing or not executable "
                    f"(Debian package {package}; run `make chromium`)"
                )
        try:
            from selenium import webdriver
            from selenium.common.exceptions import WebDriverException
            from selenium.webdriver.chrome.service import Service
        except ImportError as exc:
            raise BrowserError(f"cannot start the browser: {exc} (pip install -e '.[dev]' installs selenium)") from exc

        self._workdir = Path(tempfile.mkdtemp(prefix="sparkrun-browser-"))
        self._proxy = LoopbackProxy().start()
        driver_log = self._workdir / "chromedriver.log"
        options = webdriver.ChromeOptions()
        options.binary_location = str(self.chromium)
        for argument in _OPTIONS:
            options.add_argument(argument)
        options.add_argument(f"--window-size={self.size[0]},{self.size[1]}")
        options.add_experimental_option(
            "mobileEmulation",
            {
                "deviceMetrics": {
                    "width": self.size[0],
                    "height": self.size[1],
                    "pixelRatio": 1.0,
                    "mobile": self.mobile,
                    "touch": self.mobile,
                }
            },
        )
        options.add_argument(f"--proxy-server={self._proxy.url}")
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        service = Service(str(self.chromedriver), log_output=str(driver_log))
        failure: str | None = None
        try:
            self._driver = webdriver.Chrome(service=service, options=options)
        except WebDriverException as exc:
            failure = (exc.msg or str(exc)).strip()
        except OSError as exc:
            failure = str(exc)
        if failure is not None:
            tail = _tail(driver_log)
            self.close()
            raise BrowserError(
                f"cannot start headless Chromium ({self.chromium}) through {self.chromedriver}: {failure}"
                + (f"\nchromedriver log:\n{tail}" if tail else "")
            )
        assert self._driver is not None
        self._driver.set_page_load_timeout(_PAGE_LOAD_TIMEOUT)
        return self

    def close(self) -> None:
        """Quit the browser, chromedriver and the proxy, and remove chromedriver's log; safe to call twice."""
        driver, self._driver = self._driver, None
        if driver is not None:
            with contextlib.suppress(Exception):
                driver.quit()
        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            proxy.stop()
        workdir, self._workdir = self._workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @property
    def driver(self) -> WebDriver:
        """The Selenium driver, for what the helpers below do not cover."""
        if self._driver is None:
            raise BrowserError("the browser is not running (use it as a context manager, or call start())")
        return self._driver

    # -- pages -------------------------------------------------------------------------------------

    def open(self, url: str) -> None:
        """Load ``url`` and wait for its ``load`` event."""
        self.driver.get(url)

    def execute(self, script: str, *args: Any) -> Any:
        """Run ``script`` as the body of a function in the page (``return`` gives its result)."""
        return self.driver.execute_script(script, *args)

    def wait_for(self, css_selector: str, *, text: str | None = None, timeout: float = 10) -> WebElement:
        """The first element matching ``css_selector``, once it exists (and its text contains ``text``).

        Fails with an ``AssertionError`` saying what was seen instead when ``timeout`` seconds pass.
        """
        from selenium.webdriver.common.by import By

        def found() -> WebElement | None:
            elements = self.driver.find_elements(By.CSS_SELECTOR, css_selector)
            if not elements:
                return None
            if text is not None and text not in elements[0].text:
                return None
            return elements[0]

        def seen() -> str:
            elements = self.driver.find_elements(By.CSS_SELECTOR, css_selector)
            return f"text {elements[0].text!r}" if elements else "no such element"

        wanted = css_selector if text is None else f"{css_selector} with text {text!r}"
        return self.wait_until(found, timeout, message=lambda: f"waited {timeout} s for {wanted}: {seen()}")

    def wait_until(
        self, predicate: Callable[[], _T], timeout: float = 10, *, message: str | Callable[[], str] = ""
    ) -> _T:
        """``predicate()``'s first truthy value, polled until ``timeout`` seconds pass (then ``AssertionError``).

        The predicate may look at the page or anything else (a server's log, a file).
        """
        from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
        from selenium.webdriver.support.wait import WebDriverWait

        wait = WebDriverWait(
            self.driver, timeout, poll_frequency=_POLL, ignored_exceptions=(StaleElementReferenceException,)
        )
        try:
            result: _T = wait.until(lambda _driver: predicate())
        except TimeoutException:
            reason = message() if callable(message) else message
            raise AssertionError(reason or f"waited {timeout} s for {predicate!r}") from None
        return result

    def text_of(self, css_selector: str) -> str:
        """The rendered text of the first element matching ``css_selector`` (``NoSuchElementException`` if none)."""
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css_selector).text

    def page_source(self) -> str:
        """The current DOM, serialized (what scripts made of the page, not what the server sent)."""
        return self.driver.page_source

    def cookies(self) -> list[dict[str, Any]]:
        """The cookies visible to the current page, as WebDriver reports them (name, value, httpOnly, ...)."""
        return self.driver.get_cookies()

    # -- evidence ----------------------------------------------------------------------------------

    def screenshot(self, name: str) -> Path:
        """Save the viewport as ``<screenshot dir>/<name>.png`` and return its path."""
        directory = self._screenshots()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{_safe_name(name)}.png"
        path.write_bytes(self.driver.get_screenshot_as_png())
        return path

    def console_log(self) -> list[ConsoleMessage]:
        """Every console message of this browser so far (errors, ``console.*``, CSP violations)."""
        for entry in self.driver.get_log("browser"):  # the driver forgets what it returns: keep it here
            self._console.append(
                ConsoleMessage(level=entry.get("level", ""), source=entry.get("source", ""), message=entry["message"])
            )
        return list(self._console)

    def console_errors(self) -> list[ConsoleMessage]:
        """The ``SEVERE`` console messages: uncaught JavaScript errors, CSP violations, failed loads."""
        return [message for message in self.console_log() if message.level == "SEVERE"]

    def request_log(self) -> list[Request]:
        """Every request the browser's pages made so far, in order (fetch, EventSource, scripts, pages)."""
        for entry in self.driver.get_log("performance"):
            self._performance.append(json.loads(entry["message"])["message"])
        requests = []
        for event in self._performance:
            if event.get("method") == "Network.requestWillBeSent":
                request = event["params"]["request"]
                requests.append(
                    Request(method=request["method"], url=request["url"], headers=dict(request.get("headers", {})))
                )
        return requests

    # -- network -----------------------------------------------------------------------------------

    def set_offline(self, offline: bool) -> None:
        """Cut (``True``) or restore (``False``) the browser's network, as a lost Wi-Fi would.

        Offline, DevTools' network emulation fails every new request (``navigator.onLine`` is false) and
        the proxy drops the open connections, an EventSource's stream included: the emulation alone
        would let a stream that is already open keep flowing.
        """
        if not self._network_enabled:
            self._cdp("Network.enable", {})
            self._network_enabled = True
        self._cdp(
            "Network.emulateNetworkConditions",
            {"offline": offline, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
        if offline and self._proxy is not None:
            self._proxy.cut()

    @property
    def refused_requests(self) -> list[str]:
        """The targets of the requests the proxy refused because they were not for loopback."""
        return list(self._proxy.refused) if self._proxy is not None else []

    def _cdp(self, command: str, arguments: dict[str, Any]) -> Any:
        from selenium.common.exceptions import WebDriverException

        try:
            return self.driver.execute_cdp_cmd(command, arguments)
        except WebDriverException as exc:
            raise BrowserError(f"DevTools command {command} failed: {(exc.msg or str(exc)).strip()}") from exc

    def _screenshots(self) -> Path:
        if self._screenshot_dir is None:
            configured = os.environ.get(SCREENSHOTS_ENV)
            self._screenshot_dir = (
                Path(configured) if configured else Path(tempfile.mkdtemp(prefix="sparkrun-screenshots-"))
            )
        return self._screenshot_dir


def _safe_name(name: str) -> str:
    """``name`` usable as a file name: path separators and odd characters become ``-``."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")
    return cleaned or "screenshot"


def _tail(path: Path, lines: int = 20) -> str:
    """The last lines of a log file, or ``""`` if there is none."""
    with contextlib.suppress(OSError):
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    return ""
