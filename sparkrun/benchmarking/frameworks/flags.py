"""Framework arguments as command-line flags: ``--name value``, ``--name v1 v2``, or a bare ``--name``."""

from __future__ import annotations

from collections.abc import Mapping

from sparkrun.benchmarking.framework import Argument

__all__ = ["as_flags", "values_of"]


def values_of(value: Argument) -> list[str]:
    """An argument's values: a list stays a list, text is split on spaces (``"0 1024"`` is two depths)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, list):
        return [str(item) for item in value]
    return value.split()


def as_flags(arguments: Mapping[str, Argument], *, skip: frozenset[str] = frozenset()) -> list[str]:
    flags: list[str] = []
    for name, value in arguments.items():
        if name in skip:
            continue
        if value is True:
            flags.append(f"--{name}")
        elif isinstance(value, list):
            flags += [f"--{name}", *value]
        elif not isinstance(value, bool):
            flags += [f"--{name}", value]
    return flags
