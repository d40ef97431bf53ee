"""tool-eval-bench: tool-call scenarios, each scored pass, partial or fail, in one task.

Base arguments are the tool's own flags (``--arg short``, ``--arg trials=3``,
``--arg categories='A B'``). It runs ``tool-eval-bench run`` with ``--json``
(scenario events as JSON lines on stderr, read live by the parser) and
``--json-file`` (the result). Its working directory is the attempt's own,
holding an empty ``.env`` so the tool never picks up settings from a
``.env`` somewhere above it, and keeping its ``data/`` and ``runs/`` there.
A run whose every scenario failed to reach the server measured nothing: the
tool scores that 0 and exits 0, sparkrun says it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkrun.benchmarking.framework import Argument, Task, TaskContext, TaskOutcome
from sparkrun.benchmarking.frameworks.flags import as_flags, values_of
from sparkrun.benchmarking.frameworks.tool_env import loopback_environment
from sparkrun.benchmarking.parsers.base import ProgressParser
from sparkrun.benchmarking.parsers.tool_eval_bench import ToolEvalBenchParser
from sparkrun.benchmarking.results.result_files import read_result_json
from sparkrun.benchmarking.results.tool_eval_bench import TOOL_EVAL_BENCH_RESULT_LIMIT, summarize_tool_eval_bench
from sparkrun.errors import BenchmarkError

__all__ = ["ToolEvalBench"]

#: Failure kinds that mean the server was not reached or broke, not that the model answered badly.
_UNREACHED = frozenset({"connection_error", "timeout", "server_error"})


def _trials(arguments: Mapping[str, Argument]) -> int:
    values = values_of(arguments["trials"]) if "trials" in arguments else ["1"]
    try:
        trials = int(values[0]) if len(values) == 1 else 0
    except ValueError:
        trials = 0
    if trials < 1:
        raise BenchmarkError(f"trials is {arguments.get('trials')!r}; it must be a whole number of at least 1")
    return trials


def _unreached(data: Any) -> bool:
    """Whether every scenario result failed without reaching the model."""
    scores = data.get("scores") if isinstance(data, dict) else None
    results = scores.get("scenario_results") if isinstance(scores, dict) else None
    if not isinstance(results, list) or not results:
        return False
    return all(isinstance(r, dict) and r.get("failure_kind") in _UNREACHED for r in results)


class ToolEvalBench:
    """The tool-eval-bench framework plugin."""

    name = "tool-eval-bench"
    requirement = "tool-eval-bench==3.0.0"
    reserved = frozenset({"base-url", "json", "json-file", "output-dir", "dry-run"})
    schedule_keys: frozenset[str] = frozenset()

    def check(self, arguments: Mapping[str, Argument], bin_dir: Path) -> None:
        _trials(arguments)  # the user's mistake first: it is fixed without installing anything
        if not (bin_dir / "tool-eval-bench").is_file():
            raise BenchmarkError(
                f"tool-eval-bench is not installed in {bin_dir.parent}; run `sparkrun benchmark setup`"
            )

    def tasks(self, arguments: Mapping[str, Argument], schedule: Mapping[str, Any]) -> list[Task]:
        return [Task(0, "scenarios")]

    def command(self, task: Task, context: TaskContext) -> list[str]:
        arguments = dict(context.arguments)
        if context.model and "model" not in arguments:
            arguments["model"] = context.model
        context.directory.mkdir(parents=True, exist_ok=True)
        (context.directory / ".env").touch()  # stops the tool's search for a .env above the attempt
        return [
            str(context.bin_dir / "tool-eval-bench"),
            "run",
            *("--base-url", context.base_url),
            *as_flags(arguments),
            *("--json", "--json-file", str(context.result_path)),
        ]

    def environment(self, context: TaskContext) -> dict[str, str]:
        return loopback_environment(context.base_url)

    def parser(self, task: Task, context: TaskContext) -> ProgressParser:
        return ToolEvalBenchParser(trials=_trials(context.arguments), source=f"benchmark.{self.name}")

    def outcome(self, task: Task, context: TaskContext) -> TaskOutcome:
        data = read_result_json(context.result_path, what="tool-eval-bench result", limit=TOOL_EVAL_BENCH_RESULT_LIMIT)
        result = summarize_tool_eval_bench(data, name=str(context.result_path))
        if result.error:
            return TaskOutcome(False, {}, (), f"the tool reported an error: {result.error}", raw=result)
        if _unreached(data):
            return TaskOutcome(False, {}, (), "no scenario reached the server (connection errors only)", raw=result)
        summary = (
            f"score {result.score}: {result.passed} passed, {result.partial} partial, {result.failed} failed"
            if result.measured
            else "no scenario ran"
        )
        return TaskOutcome(result.measured, dict(result.figures), (), summary, raw=result)
