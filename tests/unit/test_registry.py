"""core.registry: plugin objects by registration and by entry point, loaded once, never half-loaded."""

from __future__ import annotations

import threading
import time
from importlib.metadata import EntryPoint

import pytest

from sparkrun.core.registry import Registry


class SlowPlugin:
    """An entry point object that takes a while to make (a plugin importing a heavy library)."""

    made = 0

    def __init__(self) -> None:
        time.sleep(0.2)
        SlowPlugin.made += 1
        self.name = "slow"


@pytest.fixture
def advertised(monkeypatch):
    entry = EntryPoint(name="slow", value=f"{__name__}:SlowPlugin", group="test.plugins")
    broken = EntryPoint(name="bad", value="no_such_module_xyz:Thing", group="test.plugins")
    monkeypatch.setattr(
        "importlib.metadata.entry_points", lambda group: [entry, broken] if group == "test.plugins" else []
    )
    SlowPlugin.made = 0


def test_a_concurrent_first_caller_waits_for_the_plugins_instead_of_missing_them(advertised):
    registry: Registry[SlowPlugin] = Registry(entry_points="test.plugins")
    seen: list[int] = []
    callers = [threading.Thread(target=lambda: seen.append(len(registry.items()))) for _ in range(4)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert seen == [1, 1, 1, 1] and SlowPlugin.made == 1


def test_keyed_registrations_replace_and_unkeyed_ones_are_held_once(advertised):
    named: Registry[SlowPlugin] = Registry(entry_points="test.plugins", key=lambda plugin: plugin.name)
    replacement = object.__new__(SlowPlugin)
    replacement.name = "slow"
    named.add(replacement)
    assert named.get("slow") is not replacement  # the entry point, loaded on first use, came later
    named.add(replacement)
    assert named.get("slow") is replacement and len(named.items()) == 1
    plain: Registry[object] = Registry()
    item = object()
    plain.add(item)
    plain.add(item)
    assert plain.items() == (item,)
    plain.remove(item)
    plain.remove(item)
    assert plain.items() == ()
