"""Fixtures for integration tests: real servers on loopback, always stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.coldsnap_harness import Snap
from tests.integration.daemon_harness import DaemonProcess
from tests.integration.phoenix import PhoenixServer


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
