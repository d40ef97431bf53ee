"""What a benchmark run is asked to do, what it returns, and the workload it runs against.

A run's id is its definition: ``bench_`` and 12 hex digits of a SHA-256 over
the framework (and its pinned requirement), the arguments, the schedule,
the recipe (name, path, hosts) and the ``--set`` values. A recipe target is
launched for the run and stopped after it, through the :class:`Workloads`
the API layer hands in (the runner does not import the API).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from sparkrun.benchmarking.framework import BenchmarkFramework
from sparkrun.core.targets import Target

__all__ = ["BenchmarkRequest", "BenchmarkResult", "Workloads", "benchmark_id", "workload"]


@dataclass(frozen=True)
class BenchmarkRequest:
    """A run to start: what to benchmark, with which framework and schedule."""

    target: str
    framework: str
    schedule: str | None = None
    overrides: Mapping[str, str] = field(default_factory=dict)
    arguments: Mapping[str, Any] = field(default_factory=dict)
    task_timeout: float = 3600.0
    exit_on_first_failure: bool = False


@dataclass(frozen=True)
class BenchmarkResult:
    """How a run stands after this invocation; ``tasks`` holds each task's last outcome."""

    benchmark_id: str
    framework: str
    version: str
    model: str
    status: str
    resumed: bool
    operation_id: str
    tasks: list[dict[str, Any]]
    completed: int
    failed: int
    pending: int


def benchmark_id(
    framework: BenchmarkFramework,
    arguments: Mapping[str, Any],
    schedule: Mapping[str, Any],
    target: Target,
    overrides: Mapping[str, str],
) -> str:
    identity = {
        "framework": framework.name,
        "requirement": framework.requirement,
        "arguments": dict(arguments),
        "schedule": dict(schedule),
        "recipe": {"name": target.recipe.name, "path": str(target.recipe.path), "hosts": list(target.recipe.hosts)},
        "overrides": dict(overrides),
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()
    return f"bench_{digest[:12]}"


class Workloads(Protocol):
    """How a run launches a recipe target and stops it again (``api.run`` and ``api.stop``)."""

    def launch(self, recipe: str, overrides: Mapping[str, str]) -> tuple[str, str]:
        """Launch the recipe; its deployment name and URL."""

    def stop(self, name: str) -> None:
        """Stop the deployment ``name``."""


@contextmanager
def workload(target: Target, overrides: Mapping[str, str], workloads: Workloads) -> Iterator[tuple[str, str]]:
    """The workload's base URL and model: a running deployment as it is, a recipe launched and stopped after."""
    model = overrides.get("model") or target.recipe.model or target.recipe.defaults.get("model") or ""
    if target.deployment is not None:
        yield f"{target.deployment.url}/v1", str(model)
        return
    name, url = workloads.launch(str(target.recipe.path), overrides)
    try:
        yield f"{url}/v1", str(model)
    finally:
        workloads.stop(name)
