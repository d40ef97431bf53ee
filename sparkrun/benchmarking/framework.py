"""What a benchmark framework plugin provides, and where plugins are found.

A framework turns base arguments plus a schedule into tasks, builds each
task's command, reads each attempt's result file, and may give a live
progress parser. Its tool runs in an environment of its own
(:mod:`sparkrun.benchmarking.environments`), never in sparkrun's. Plugins
register with :func:`register_framework` or through the entry point group
``sparkrun.benchmark_frameworks`` (a class to instantiate); the two shipped
frameworks are entry points of sparkrun's own distribution.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkrun.benchmarking.parsers.base import ProgressParser
from sparkrun.core.context import SparkrunContext
from sparkrun.core.registry import Registry
from sparkrun.errors import BenchmarkError

__all__ = [
    "ENTRY_POINT_GROUP",
    "Argument",
    "BenchmarkFramework",
    "Task",
    "TaskContext",
    "TaskOutcome",
    "find_framework",
    "framework_names",
    "load_plugins",
    "register_framework",
]

ENTRY_POINT_GROUP = "sparkrun.benchmark_frameworks"
#: A framework argument: a flag's value, the values of a list flag, or True for a bare flag.
Argument = str | list[str] | bool


@dataclass(frozen=True)
class Task:
    """One task of a run: its position, its label (``d=0 c=2``) and the arguments it adds."""

    index: int
    label: str
    arguments: Mapping[str, Argument] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "label": self.label, "arguments": dict(self.arguments)}


@dataclass(frozen=True)
class TaskContext:
    """Where and against what one attempt runs."""

    base_url: str  # the workload's OpenAI-compatible base URL, ending in /v1
    model: str
    bin_dir: Path  # the framework environment's executables
    directory: Path  # this attempt's own directory: result file, progress, scratch
    first: bool  # the first task this session runs (a warm-up belongs there only)
    arguments: Mapping[str, Argument] = field(default_factory=dict)  # the run's, under the task's

    @property
    def result_path(self) -> Path:
        return self.directory / "result.json"


@dataclass(frozen=True)
class TaskOutcome:
    """What an attempt measured, read from its result file.

    ``figures`` are flat scalars (metrics, span attributes, dashboards);
    ``rows`` are the lines of the results table.
    """

    measured: bool
    figures: Mapping[str, float | int | str] = field(default_factory=dict)
    rows: Sequence[Mapping[str, Any]] = ()
    summary: str = ""
    #: The result document as read, for a progress parser's final reconciliation.
    raw: Any = None


class BenchmarkFramework(Protocol):
    """A benchmark tool sparkrun can schedule."""

    #: The framework's name, as ``--framework`` takes it and in source ``benchmark.<name>``.
    name: str
    #: What the environment installs: a pinned requirement, recorded in the results (None: nothing to install).
    requirement: str | None
    #: Arguments sparkrun sets itself (refused from ``--arg``).
    reserved: frozenset[str]
    #: Schedule keys besides ``title`` and ``arguments`` (for example ``depth`` and ``concurrency``).
    schedule_keys: frozenset[str]

    def check(self, arguments: Mapping[str, Argument], bin_dir: Path) -> None:
        """Raise :class:`BenchmarkError` naming what is missing before anything runs."""

    def tasks(self, arguments: Mapping[str, Argument], schedule: Mapping[str, Any]) -> list[Task]:
        """The task list for these base arguments and schedule (the schedule's keys were checked)."""

    def command(self, task: Task, context: TaskContext) -> list[str]:
        """The attempt's argv."""

    def environment(self, context: TaskContext) -> dict[str, str]:
        """Environment variables the tool needs on top of sparkrun's (offline switches, caches)."""

    def parser(self, task: Task, context: TaskContext) -> ProgressParser | None:
        """A parser of the attempt's stderr lines, or None to report start and finish only."""

    def outcome(self, task: Task, context: TaskContext) -> TaskOutcome:
        """Read the attempt's result file; raise ``ValueError`` naming the file if it is unusable."""


_registry: Registry[BenchmarkFramework] = Registry(entry_points=ENTRY_POINT_GROUP, key=lambda framework: framework.name)


def register_framework(framework: BenchmarkFramework) -> None:
    """Make ``framework`` schedulable (a later registration of the same name wins)."""
    _registry.add(framework)


def framework_names() -> list[str]:
    return sorted(framework.name for framework in _registry.items())


def find_framework(name: str) -> BenchmarkFramework:
    """The framework of that name, or an error listing the known ones."""
    framework = _registry.get(name)
    if framework is None:
        import difflib

        known = framework_names()
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise BenchmarkError(f"unknown benchmark framework (framework={name!r}, known: {', '.join(known)}){hint}")
    return framework


def load_plugins(sctx: SparkrunContext) -> None:
    """Import the modules listed under ``benchmark.plugins`` in the configuration (they register frameworks)."""
    import importlib

    section = sctx.config.get("benchmark") or {}
    modules = section.get("plugins") if isinstance(section, dict) else None
    if modules is None:
        return
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise BenchmarkError(f"benchmark.plugins in the configuration must be a list of module names, not {modules!r}")
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as error:
            raise BenchmarkError(f"benchmark plugin module {module!r} could not be imported: {error}") from None
