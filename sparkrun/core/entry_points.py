"""Loading plugin objects advertised under an entry point group, once per process."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["forget", "load_group_once"]

_log = logging.getLogger(__name__)
_loaded: set[str] = set()


def load_group_once(group: str, register: Callable[[Any], None]) -> None:
    """Call ``register`` with what each entry point of ``group`` makes, the first time only.

    Each entry point names a zero-argument callable (usually a class); one
    that fails to load is logged and skipped, never fatal.
    """
    if group in _loaded:
        return
    _loaded.add(group)
    from importlib.metadata import entry_points

    for entry_point in entry_points(group=group):
        try:
            register(entry_point.load()())
        except Exception:
            _log.warning("could not load %s entry point %r", group, entry_point.value, exc_info=True)


def forget(group: str) -> None:
    """Load ``group`` again on next use (for tests that install entry points)."""
    _loaded.discard(group)
