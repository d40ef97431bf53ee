"""Fixtures for integration tests: real servers on loopback, always stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.browser import DESKTOP, PHONE, SCREENSHOTS_ENV, Browser, BrowserError
from tests.integration.coldsnap_harness import Snap
from tests.integration.daemon_harness import DaemonProcess
from tests.integration.phoenix import PhoenixServer
from tests.integration.ssh_hosts import SshHosts


@pytest.fixture(scope="session")
def phoenix() -> Iterator[PhoenixServer]:
    """A Phoenix OTLP backend shared by the session (it takes ~15 s to start).

    A server that cannot start fails the tests that need it: CI must never skip them silently.
    """
    server = PhoenixServer()
    try:
        failure: str | None = None
        try:
            server.start()
        except RuntimeError as exc:
            failure = str(exc)
        if failure is not None:
            # Outside the except block, so the report shows the reason once, not chained twice.
            pytest.fail(failure, pytrace=False)
        yield server
    finally:
        server.stop()


@pytest.fixture
def start_daemon(tmp_path) -> Iterator[Any]:
    """``start_daemon(**options)`` starts a daemon; all of them are stopped after the test."""
    started: list[DaemonProcess] = []

    def start(**options: Any) -> DaemonProcess:
        daemon = DaemonProcess(tmp_path / f"daemon-{len(started)}", **options)
        started.append(daemon)
        return daemon.start()

    try:
        yield start
    finally:
        for daemon in reversed(started):
            daemon.stop()


@pytest.fixture
def daemon(start_daemon) -> DaemonProcess:
    return start_daemon()


@pytest.fixture
def snap(tmp_path) -> Iterator[Snap]:
    """A workload on two loopback hosts under the example ColdSnap controller; its servers are killed after."""
    workload = Snap(tmp_path)
    try:
        yield workload
    finally:
        workload.cleanup()


@pytest.fixture
def captured_snap(snap) -> Snap:
    """``snap`` with its snapshot taken."""
    done = snap.cli("capture")
    assert done.returncode == 0, done.stderr
    return snap


@pytest.fixture(scope="session")
def benchmark_tools() -> dict[str, Path]:
    """The bin directories of the real frameworks' environments, as sparkrun manages them.

    ``make test`` prepares them (``sparkrun benchmark setup`` into ``SPARKRUN_BENCHMARK_ENVS``); a run
    without them installs them here. One that cannot be installed fails the tests that need it.
    """
    import os

    from sparkrun.benchmarking.environments import prepare_environment
    from sparkrun.benchmarking.frameworks.llama_benchy import LlamaBenchy
    from sparkrun.benchmarking.frameworks.tool_eval_bench import ToolEvalBench

    os.environ.setdefault("SPARKRUN_BENCHMARK_ENVS", str(Path(__file__).resolve().parents[2] / ".bench-envs"))
    tools: dict[str, Path] = {}
    failure = None
    for framework in (LlamaBenchy(), ToolEvalBench()):
        try:
            tools[framework.name] = prepare_environment(framework.requirement).bin_dir
        except Exception as error:
            failure = f"cannot prepare the environment of {framework.requirement}: {error}"
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    return tools


@pytest.fixture(scope="session")
def tokenizer(benchmark_tools, tmp_path_factory) -> Path:
    """A word-level tokenizer for llama-benchy's --tokenizer (examples/benchmarks/make_tokenizer.py)."""
    import subprocess

    out = tmp_path_factory.mktemp("tokenizer")
    python = benchmark_tools["llama-benchy"] / "python"  # its environment has `tokenizers`; sparkrun's has not
    script = Path(__file__).resolve().parents[2] / "examples" / "benchmarks" / "make_tokenizer.py"
    done = subprocess.run([str(python), str(script), str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="session")
def corpus_url() -> Iterator[str]:
    """``examples/benchmarks/corpus.txt`` over loopback HTTP: llama-benchy's --book-url must be http(s)."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """Silenced: a test's output is no place for an access log."""

    directory = Path(__file__).resolve().parents[2] / "examples" / "benchmarks"
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/corpus.txt"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _started_or_fail(harness: SshHosts) -> SshHosts:
    """``harness`` started, or the test failed with sshd's reason: CI must never skip SSH tests silently."""
    failure: str | None = None
    try:
        harness.start()
    except RuntimeError as exc:
        failure = str(exc)
    if failure is not None:
        # Outside the except block, so the report shows the reason once, not chained twice.
        pytest.fail(failure, pytrace=False)
    return harness


@pytest.fixture(scope="session")
def ssh_hosts() -> Iterator[SshHosts]:
    """Two real SSH hosts on loopback (``spark-1`` on 127.0.0.x, ``spark-2``), shared by the session.

    Shared means a test leaves the homes as it found them. sshd starts only for a session that uses it.
    """
    harness = SshHosts(2)
    try:
        yield _started_or_fail(harness)
    finally:
        harness.stop()


@pytest.fixture(scope="session")
def four_ssh_hosts() -> Iterator[SshHosts]:
    """Four hosts of their own (other users than ``ssh_hosts``'), for fan-out across more machines."""
    harness = SshHosts(4)
    try:
        yield _started_or_fail(harness)
    finally:
        harness.stop()


@pytest.fixture
def start_ssh_hosts() -> Iterator[Any]:
    """``start_ssh_hosts(count)`` starts fresh hosts a test may break; all are stopped after the test."""
    started: list[SshHosts] = []

    def start(count: int = 2) -> SshHosts:
        harness = SshHosts(count)
        started.append(harness)
        return _started_or_fail(harness)

    try:
        yield start
    finally:
        for harness in reversed(started):
            harness.stop()


@pytest.fixture(scope="session")
def screenshot_root(tmp_path_factory) -> Path:
    """Where the session's screenshots go: ``$SPARKRUN_SCREENSHOTS`` if set, else a session temporary directory."""
    import os

    configured = os.environ.get(SCREENSHOTS_ENV)
    return Path(configured) if configured else tmp_path_factory.mktemp("screenshots")


def _browser_or_fail(request: pytest.FixtureRequest, root: Path, size: tuple[int, int], mobile: bool) -> Browser:
    """A started browser whose screenshots go to ``root/<test name>``, or the test failed with Chromium's reason."""
    import re

    directory = root / re.sub(r"[^A-Za-z0-9_.-]+", "-", request.node.name).strip("-")
    browser = Browser(size, mobile=mobile, screenshot_dir=directory)
    failure: str | None = None
    try:
        browser.start()
    except BrowserError as exc:
        failure = str(exc)
    if failure is not None:
        # A browser that cannot start fails the test: CI must never skip the console's tests silently.
        pytest.fail(failure, pytrace=False)
    return browser


@pytest.fixture
def browser(request, screenshot_root) -> Iterator[Browser]:
    """Headless Chromium with a 1280x900 desktop viewport (tests/integration/browser.py), quit after the test."""
    started = _browser_or_fail(request, screenshot_root, DESKTOP, mobile=False)
    try:
        yield started
    finally:
        started.close()


@pytest.fixture
def phone_browser(request, screenshot_root) -> Iterator[Browser]:
    """Headless Chromium emulating a 390x844 phone (touch, mobile viewport), quit after the test."""
    started = _browser_or_fail(request, screenshot_root, PHONE, mobile=True)
    try:
        yield started
    finally:
        started.close()
