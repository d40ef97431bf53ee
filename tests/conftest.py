"""Shared fixtures; also refuses a run that collected no tests."""

from __future__ import annotations

import logging
from queue import SimpleQueue

import pytest

from sparkrun.application import initialize
from sparkrun.core.context import SparkrunContext


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # An empty run must never look like a pass, whatever selected it away.
    if session.testscollected == 0 and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED


@pytest.fixture
def sctx(tmp_path) -> SparkrunContext:
    """A context with a queue subscriber; events land in ``sctx.queue``."""
    context = initialize(state_dir=tmp_path / "state", config_path=None)
    queue: SimpleQueue = SimpleQueue()
    context.events = queue.put
    context.queue = queue  # type: ignore[attr-defined]
    return context


#: The counter report of the specification's producer fragment, reused across tests.
SPEC_TRANSFER = {
    "stage": "transfer",
    "status": "running",
    "current": 1048576,
    "total": 4194304,
    "total_kind": "upper_bound",
    "unit": "bytes",
    "metrics": {"bytes_per_second": 524288, "reused_layers": 2},
}


def drain(queue: SimpleQueue) -> list[dict]:
    """Everything currently queued, in order."""
    events = []
    while not queue.empty():
        events.append(queue.get())
    return events


@pytest.fixture(autouse=True)
def _restore_logging():
    """Tests that configure logging leave the process as they found it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    factory = logging.getLogRecordFactory()
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.setLogRecordFactory(factory)


@pytest.fixture(autouse=True)
def _isolated_config(tmp_path_factory, monkeypatch):
    """Never read the developer's own configuration file or state."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))
    monkeypatch.delenv("SPARKRUN_CONFIG", raising=False)
    monkeypatch.delenv("SPARKRUN_STATE_DIR", raising=False)
