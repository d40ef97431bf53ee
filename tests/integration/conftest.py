"""Fixtures for integration tests: real servers on loopback, always stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

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
