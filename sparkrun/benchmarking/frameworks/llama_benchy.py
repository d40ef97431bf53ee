"""llama-benchy: prompt processing and generation throughput, one task per depth and concurrency.

Base arguments are llama-benchy's own flags (``--arg pp=512 --arg tg=32``,
``--arg tokenizer=PATH --arg book-url=URL`` to stay offline). The schedule's
``depth`` and ``concurrency`` lists (or the arguments of those names) make
the tasks, one per pair, labelled ``d=D c=C``. Tasks after the first skip
the warm-up and the coherence check, which the first one did. Progress comes
from ``--emit-progress``, pointed at stderr so the parser reads it live;
results from ``--save-result``.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import product
from pathlib import Path
from typing import Any

from sparkrun.benchmarking.framework import Argument, Task, TaskContext, TaskOutcome
from sparkrun.benchmarking.frameworks.flags import as_flags, values_of
from sparkrun.benchmarking.frameworks.tool_env import loopback_environment
from sparkrun.benchmarking.parsers.base import ProgressParser
from sparkrun.benchmarking.parsers.llama_benchy import LlamaBenchyParser
from sparkrun.benchmarking.results.llama_benchy import read_llama_benchy_result
from sparkrun.errors import BenchmarkError

__all__ = ["LlamaBenchy"]

_MATRIX = ("depth", "concurrency")
_MAX_TASKS = 1000


def _levels(name: str, arguments: Mapping[str, Argument], schedule: Mapping[str, Any], default: str) -> list[int]:
    raw = schedule.get(name, arguments.get(name, default))
    values = raw if isinstance(raw, list) else values_of(raw) if isinstance(raw, str) else [raw]
    levels = []
    for value in values:
        try:
            level = int(str(value))
        except ValueError:
            raise BenchmarkError(
                f"{name} is {value!r}; llama-benchy takes whole numbers (a list for a sweep)"
            ) from None
        if level < (1 if name == "concurrency" else 0):
            raise BenchmarkError(f"{name} is {level}; it must be at least {1 if name == 'concurrency' else 0}")
        levels.append(level)
    if not levels:
        raise BenchmarkError(f"{name} is empty; give at least one value")
    return levels


class LlamaBenchy:
    """The llama-benchy framework plugin."""

    name = "llama-benchy"
    requirement = "llama-benchy==0.4.0"
    reserved = frozenset({"base-url", "format", "save-result", "emit-progress"})
    schedule_keys = frozenset(_MATRIX)

    def check(self, arguments: Mapping[str, Argument], bin_dir: Path) -> None:
        if not (bin_dir / "llama-benchy").is_file():
            raise BenchmarkError(f"llama-benchy is not installed in {bin_dir.parent}; run `sparkrun benchmark setup`")

    def tasks(self, arguments: Mapping[str, Argument], schedule: Mapping[str, Any]) -> list[Task]:
        depths = _levels("depth", arguments, schedule, "0")
        concurrencies = _levels("concurrency", arguments, schedule, "1")
        if len(depths) * len(concurrencies) > _MAX_TASKS:
            raise BenchmarkError(
                f"the schedule makes {len(depths) * len(concurrencies)} tasks; the limit is {_MAX_TASKS}"
            )
        return [
            Task(index, f"d={depth} c={concurrency}", {"depth": str(depth), "concurrency": str(concurrency)})
            for index, (depth, concurrency) in enumerate(product(depths, concurrencies))
        ]

    def command(self, task: Task, context: TaskContext) -> list[str]:
        arguments = dict(context.arguments)
        if context.model and "model" not in arguments:
            arguments["model"] = context.model
        command = [
            str(context.bin_dir / "llama-benchy"),
            *("--base-url", context.base_url),
            *as_flags(arguments, skip=frozenset(_MATRIX)),
            *("--depth", str(task.arguments["depth"]), "--concurrency", str(task.arguments["concurrency"])),
            *("--format", "json", "--save-result", str(context.result_path), "--emit-progress", "/dev/stderr"),
        ]
        if not context.first:  # the first task of the session warmed the server and checked coherence
            command += [flag for flag in ("--no-warmup", "--skip-coherence") if flag[2:] not in arguments]
        return command

    def environment(self, context: TaskContext) -> dict[str, str]:
        return loopback_environment(context.base_url)

    def parser(self, task: Task, context: TaskContext) -> ProgressParser:
        return LlamaBenchyParser(source=f"benchmark.{self.name}")

    def outcome(self, task: Task, context: TaskContext) -> TaskOutcome:
        result = read_llama_benchy_result(context.result_path)
        rows = [
            {
                "pp": row.pp,
                "tg": row.tg,
                "depth": row.depth,
                "concurrency": row.concurrency,
                "pp_tokens_per_second": row.pp_tokens_per_second,
                "tg_tokens_per_second": row.tg_tokens_per_second,
                "ttft_ms": row.ttft_ms,
            }
            for row in result.rows
            if not row.context_phase
        ]
        summary = ""
        if result.measured:
            summary = f"pp {result.pp_tokens_per_second or 0:,.1f} t/s, tg {result.tg_tokens_per_second or 0:,.1f} t/s"
        else:
            summary = "no throughput was measured (every request failed, or none ran)"
        return TaskOutcome(result.measured, dict(result.figures), rows, summary, raw=result)
