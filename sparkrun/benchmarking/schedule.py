"""Schedules and framework arguments: what the user asks a benchmark run to do.

A schedule is a YAML (or JSON) mapping: an optional ``title``, optional base
``arguments`` for the framework, and the keys the framework turns into tasks
(llama-benchy's ``depth`` and ``concurrency`` lists). Arguments are the
framework's kebab-case flags, as ``--arg NAME=VALUE`` gives them (a bare
``--arg NAME`` is a flag without value); those sparkrun sets itself are
refused. Errors name the file, the key or argument, and what it must be.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sparkrun.benchmarking.framework import Argument, BenchmarkFramework
from sparkrun.core.short_repr import short_repr
from sparkrun.errors import BenchmarkError

__all__ = ["check_arguments", "load_schedule", "parse_arguments"]

_FLAG = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_MAX_VALUE_CHARS = 4096
_MAX_ARGUMENTS = 64
_BASE_KEYS = ("title", "arguments")


def parse_arguments(items: Iterable[str]) -> dict[str, Argument]:
    """``NAME=VALUE`` (or a bare ``NAME``) items of ``--arg``, as framework arguments."""
    arguments: dict[str, Argument] = {}
    for item in items:
        name, equals, value = item.partition("=")
        arguments[name.strip()] = value if equals else True
    return arguments


def _scalar(item: Any) -> bool:
    return isinstance(item, (int, float, str)) and not isinstance(item, bool)


def _argument(name: Any, value: Any, where: str) -> tuple[str, Argument]:
    if not isinstance(name, str) or not _FLAG.fullmatch(name):
        raise BenchmarkError(
            f"{where} has the argument {short_repr(name)}; arguments are kebab-case flag names "
            "(lowercase letters, digits and '-', at most 64 characters), such as book-url"
        )
    if isinstance(value, bool):
        if not value:
            raise BenchmarkError(f"{where} sets {name} to false; leave a flag out instead")
        return name, True
    result: Argument
    if isinstance(value, str):
        items = [value]
        result = value
    elif isinstance(value, (int, float)):
        items = [str(value)]
        result = items[0]
    elif isinstance(value, list) and value and all(_scalar(item) for item in value):
        items = [str(item) for item in value]
        result = items
    else:
        raise BenchmarkError(
            f"{where} argument {name} is {short_repr(value)}; expected text, a number or a non-empty list of them"
        )
    if any("\x00" in item for item in items):
        raise BenchmarkError(f"{where} argument {name} holds a NUL character")
    total = sum(len(item) for item in items)
    if total > _MAX_VALUE_CHARS:
        raise BenchmarkError(f"{where} argument {name} is {total} characters long; the limit is {_MAX_VALUE_CHARS}")
    return name, result


def check_arguments(framework: BenchmarkFramework, arguments: Mapping[str, Any], where: str) -> dict[str, Argument]:
    """Arguments checked: plain flag names, plain values, none that sparkrun sets itself."""
    if len(arguments) > _MAX_ARGUMENTS:
        raise BenchmarkError(f"{where} has {len(arguments)} arguments; the limit is {_MAX_ARGUMENTS}")
    checked: dict[str, Argument] = {}
    for name, value in arguments.items():
        key, checked_value = _argument(name, value, where)
        if key in framework.reserved:
            raise BenchmarkError(
                f"{where} sets {key}, which sparkrun sets itself for {framework.name} "
                f"(reserved: {', '.join(sorted(framework.reserved))})"
            )
        checked[key] = checked_value
    return checked


def load_schedule(path: str | Path | None, framework: BenchmarkFramework) -> dict[str, Any]:
    """The schedule in ``path`` (empty without one), its keys checked against the framework's."""
    if path is None:
        return {}
    from sparkrun.core.yaml_files import load_yaml_file

    path = Path(path)
    data, _ = load_yaml_file(path, what="schedule", error=BenchmarkError)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise BenchmarkError(f"{path}: a schedule is a mapping, not {type(data).__name__}")
    allowed = (*_BASE_KEYS, *sorted(framework.schedule_keys))
    for key in data:
        if key not in allowed:
            raise BenchmarkError(
                f"{path}: unknown schedule key {short_repr(key)} for {framework.name}; expected {', '.join(allowed)}"
            )
    title = data.get("title", "")
    if not isinstance(title, str) or len(title) > 200:
        raise BenchmarkError(f"{path}: title is {short_repr(title)}; it must be text of at most 200 characters")
    arguments = data.get("arguments") or {}
    if not isinstance(arguments, dict):
        raise BenchmarkError(f"{path}: arguments must be a mapping of flag names to values")
    schedule = dict(data)
    schedule["arguments"] = check_arguments(framework, arguments, f"{path}:")
    return schedule
