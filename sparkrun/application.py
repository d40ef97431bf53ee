"""Entry point for library users: build the context every API call takes."""

from __future__ import annotations

from pathlib import Path

from sparkrun.config import Config, load_config
from sparkrun.core.context import SparkrunContext
from sparkrun.core.operation import OperationObserver, Subscriber

__all__ = ["SparkrunContext", "initialize"]


def initialize(
    *,
    config: Config | None = None,
    config_path: Path | str | None = None,
    state_dir: Path | str | None = None,
    events: Subscriber | None = None,
    observers: list[OperationObserver] | None = None,
) -> SparkrunContext:
    """Load configuration and return a context (``sctx``) for API calls.

    Library use never touches the application's logging configuration.
    """
    resolved = config if config is not None else load_config(config_path, state_dir=state_dir)
    return SparkrunContext(config=resolved, events=events, observers=list(observers or ()))
