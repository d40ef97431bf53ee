"""Plugin registries: what observers, distribution providers and daemon operations are known.

One small, thread-safe collection for each kind of plugin. Plugins register
directly (``add``) or are advertised under an entry point group, loaded the
first time anyone asks (``items``/``get``). Loading happens once per process,
under a lock, and the registry counts as loaded only when every entry point
has been registered: a concurrent first caller waits for it instead of
seeing a registry without its plugins.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["Registry"]

_log = logging.getLogger(__name__)
T = TypeVar("T")


class Registry(Generic[T]):
    """Plugin objects of one kind, in registration order.

    With ``key``, objects are named and a later registration under a name
    replaces the earlier one; without, an object is held once. With
    ``entry_points``, each entry point of that group names a zero-argument
    callable (usually a class) whose result is registered on first use; one
    that fails to load is logged and skipped.
    """

    def __init__(self, *, entry_points: str | None = None, key: Callable[[T], str] | None = None) -> None:
        self._group = entry_points
        self._key = key
        self._items: dict[object, T] = {}
        self._lock = threading.Lock()
        self._loading = threading.Lock()
        self._loaded = entry_points is None

    def add(self, item: T) -> None:
        """Register ``item`` (replacing an item of the same key)."""
        identity = self._key(item) if self._key is not None else id(item)
        with self._lock:
            if self._key is not None:
                self._items.pop(identity, None)  # a replacement goes to the end, as a fresh registration
            self._items.setdefault(identity, item)

    def remove(self, item: T) -> None:
        """Forget ``item``; an unknown one is ignored."""
        with self._lock:
            for identity, known in list(self._items.items()):
                if known is item:
                    del self._items[identity]

    def items(self) -> tuple[T, ...]:
        """Every registered object (entry points loaded first)."""
        self._load_entry_points()
        with self._lock:
            return tuple(self._items.values())

    def get(self, key: str) -> T | None:
        """The object registered under ``key`` (entry points loaded first)."""
        self._load_entry_points()
        with self._lock:
            return self._items.get(key)

    def reload_entry_points(self) -> None:
        """Load the entry point group again on next use (for tests that install entry points)."""
        with self._loading:
            self._loaded = self._group is None

    def _load_entry_points(self) -> None:
        if self._loaded:
            return
        with self._loading:
            self._load_entry_points_locked()

    def _load_entry_points_locked(self) -> None:
        group = self._group
        if self._loaded or group is None:  # somebody else loaded them while this caller waited
            return
        from importlib.metadata import entry_points

        for entry_point in entry_points(group=group):
            try:
                self.add(entry_point.load()())
            except Exception:
                _log.warning("could not load %s entry point %r", group, entry_point.value, exc_info=True)
        self._loaded = True
