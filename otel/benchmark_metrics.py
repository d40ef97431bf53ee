"""Benchmark results as metrics: the figures of each task, its outcomes and attempt durations.

Fed the ``benchmark`` events of a run (``task_end`` and ``results_update``),
so it works the same in a CLI process and in the daemon, which rebuilds
metrics from what it journals. Labels are the framework, the task's label
(``d=0 c=2``: a schedule's, so few), the model and the figure's name; a
benchmark, attempt or operation id is never a label. The latest value of
each figure is kept for the gauge, for at most ``MAX_SERIES`` series (the
oldest is forgotten first), so a daemon that runs benchmarks for months
holds a bounded table.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

__all__ = ["MAX_SERIES", "BenchmarkMetrics"]

MAX_SERIES = 5000
_ATTEMPT_BUCKETS = (1, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200)


class BenchmarkMetrics:
    """``sparkrun.benchmark.figure`` (gauge), ``.tasks`` (counter) and ``.attempt.duration`` (histogram)."""

    def __init__(self, meter: Meter) -> None:
        self._lock = threading.Lock()
        self._figures: dict[tuple[str, str, str, str], float] = {}
        self._frameworks: dict[str, str] = {}  # benchmark id -> framework, for task_end events
        meter.create_observable_gauge(
            "sparkrun.benchmark.figure",
            callbacks=[self._observe],
            description="The latest value of each benchmark figure, by framework, task, model and figure.",
        )
        self._tasks = meter.create_counter(
            "sparkrun.benchmark.tasks", unit="{task}", description="Benchmark attempts, by framework and outcome."
        )
        self._duration = meter.create_histogram(
            "sparkrun.benchmark.attempt.duration",
            unit="s",
            description="Benchmark attempt durations, by framework and outcome.",
            explicit_bucket_boundaries_advisory=_ATTEMPT_BUCKETS,
        )

    def event(self, event: Mapping[str, Any]) -> None:
        """Take one ``benchmark`` event; kinds without figures or outcomes are ignored."""
        kind = event.get("kind")
        if kind == "task_end":
            framework = str(event.get("framework") or self._frameworks.get(str(event.get("benchmark_id")), "unknown"))
            labels = {"framework": framework, "outcome": "succeeded" if event.get("success") else "failed"}
            self._tasks.add(1, labels)
            duration = event.get("duration_s")
            if isinstance(duration, (int, float)) and not isinstance(duration, bool) and duration >= 0:
                self._duration.record(duration, labels)
        elif kind == "results_update" and isinstance(event.get("results"), Mapping):
            self._results(event["results"])

    def _results(self, results: Mapping[str, Any]) -> None:
        framework, model = str(results.get("framework", "unknown")), str(results.get("model") or "unknown")
        tasks = results.get("tasks")
        with self._lock:
            self._frameworks[str(results.get("benchmark_id"))] = framework
            for task in tasks if isinstance(tasks, list) else ():
                figures = task.get("figures") if isinstance(task, Mapping) else None
                if not isinstance(figures, Mapping) or task.get("outcome") != "succeeded":
                    continue
                for name, value in figures.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        key = (framework, str(task.get("label", "")), model, str(name))
                        self._figures.pop(key, None)  # the latest goes to the end: the oldest leaves first
                        self._figures[key] = float(value)
            while len(self._figures) > MAX_SERIES:
                del self._figures[next(iter(self._figures))]
            while len(self._frameworks) > MAX_SERIES:
                del self._frameworks[next(iter(self._frameworks))]

    def _observe(self, options: CallbackOptions) -> Iterable[Observation]:
        with self._lock:
            figures = list(self._figures.items())
        return [
            Observation(value, {"framework": framework, "task": task, "model": model, "figure": figure})
            for (framework, task, model, figure), value in figures
        ]
