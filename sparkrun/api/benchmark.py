"""``api.benchmark`` and friends: scheduled benchmark runs, resumable, reported attempt by attempt.

A run's result (or the raised exception) is the outcome; the events on the
way are for people and dashboards. ``callback`` receives the benchmark
events of the run (``schedule_started`` ... ``run_complete``) and, as
``task_progress``, every attempt's feedback envelope.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun.api.launch import RunOptions, run
from sparkrun.api.manage import stop
from sparkrun.application import initialize
from sparkrun.benchmarking.environments import FrameworkEnvironment, prepare_environment
from sparkrun.benchmarking.framework import find_framework, framework_names, load_plugins
from sparkrun.benchmarking.requests import BenchmarkRequest, BenchmarkResult
from sparkrun.benchmarking.run_events import BenchmarkCallback
from sparkrun.benchmarking.run_state import RunState, RunStore
from sparkrun.benchmarking.runner import resume_benchmark, run_benchmark
from sparkrun.core.context import SparkrunContext
from sparkrun.core.operation import operation_scope
from sparkrun.core.redaction import Redactor
from sparkrun.feedback import get_feedback

__all__ = [
    "BenchmarkRequest",
    "BenchmarkResult",
    "benchmark",
    "benchmark_resume",
    "benchmark_runs",
    "benchmark_setup",
    "benchmark_state",
]

#: Framework arguments whose values are secrets: redacted from every event, log line and result.
_SECRET_ARGUMENTS = ("api-key", "token", "header")


def _redactor(arguments: dict[str, Any]) -> Redactor:
    redactor = Redactor()
    for name in _SECRET_ARGUMENTS:
        value = arguments.get(name)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and len(item) >= 4:
                redactor.add(item)
    return redactor


class _Workloads:
    """A recipe target launched for a run with ``api.run`` and stopped after it with ``api.stop``."""

    def __init__(self, sctx: SparkrunContext) -> None:
        self._sctx = sctx

    def launch(self, recipe: str, overrides: Mapping[str, str]) -> tuple[str, str]:
        launched = run(RunOptions(recipe=recipe, overrides=dict(overrides)), sctx=self._sctx)
        return launched.name, launched.url

    def stop(self, name: str) -> None:
        stop(name, sctx=self._sctx)


def benchmark(
    request: BenchmarkRequest, *, sctx: SparkrunContext | None = None, callback: BenchmarkCallback | None = None
) -> BenchmarkResult:
    """Run (or start over) the benchmark ``request`` describes, as one ``benchmark`` operation."""
    sctx = sctx if sctx is not None else initialize()
    with operation_scope(sctx, name="benchmark", processors=(_redactor(dict(request.arguments)),)) as operation:
        return run_benchmark(sctx, operation, request, _Workloads(sctx), callback)


def benchmark_resume(
    benchmark_id: str, *, sctx: SparkrunContext | None = None, callback: BenchmarkCallback | None = None
) -> BenchmarkResult:
    """Retry the failed and pending tasks of run ``benchmark_id``."""
    sctx = sctx if sctx is not None else initialize()
    state = RunStore(sctx.config.state_dir).load(benchmark_id)
    with operation_scope(sctx, name="benchmark", processors=(_redactor(state.arguments),)) as operation:
        return resume_benchmark(sctx, operation, benchmark_id, _Workloads(sctx), callback)


def benchmark_setup(
    frameworks: list[str] | None = None, *, sctx: SparkrunContext | None = None
) -> list[FrameworkEnvironment]:
    """Install (or find cached) the environments of ``frameworks`` (every known one by default)."""
    sctx = sctx if sctx is not None else initialize()
    with operation_scope(sctx, name="benchmark.setup"):
        load_plugins(sctx)
        names = frameworks or framework_names()
        found = [find_framework(name) for name in names]  # every name checked before anything installs
        feedback = get_feedback("benchmark.setup", sctx=sctx)
        return [prepare_environment(framework.requirement, feedback) for framework in found]


def benchmark_runs(*, sctx: SparkrunContext | None = None) -> list[RunState]:
    """Every recorded run, most recent first (a run whose process died is marked crashed on the way)."""
    sctx = sctx if sctx is not None else initialize()
    store = RunStore(sctx.config.state_dir)
    return [store.load(benchmark_id) for benchmark_id in store.ids()]


def benchmark_state(benchmark_id: str, *, sctx: SparkrunContext | None = None) -> tuple[RunState, list[dict[str, Any]]]:
    """One run's state and each task's last outcome."""
    sctx = sctx if sctx is not None else initialize()
    store = RunStore(sctx.config.state_dir)
    state = store.load(benchmark_id)
    return state, store.task_results(state)
