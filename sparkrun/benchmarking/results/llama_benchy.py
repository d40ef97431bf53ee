"""The headline figures of a llama-benchy result file (``--format json --save-result F``).

The file holds the run's metadata (``version``, ``model``, ``latency_ms``,
``max_concurrency``, ...) and ``benchmarks``: one entry per measured
combination of prompt size (``prompt_size``), generated tokens
(``response_size``), depth (``context_size``) and ``concurrency``, with
``is_context_prefill_phase`` for the context-loading half of a prefix-caching
test. Each throughput or latency is ``null`` or ``{mean, std, values}``:
``pp_throughput`` and ``tg_throughput`` in tokens per second (all requests
together), ``e2e_ttft`` in milliseconds.

The headline figures are means over the entries that are not context-prefill
phases (a task usually has one such entry): what a user would quote.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sparkrun.benchmarking.results.result_files import FigureValue, ResultFields, read_result_json

__all__ = [
    "LLAMA_BENCHY_RESULT_LIMIT",
    "MAX_BENCHMARK_ENTRIES",
    "LlamaBenchyResult",
    "LlamaBenchyRow",
    "read_llama_benchy_result",
    "summarize_llama_benchy",
]

#: The largest result file read, in bytes (saved throughput time series make files large).
LLAMA_BENCHY_RESULT_LIMIT = 64 * 1024 * 1024
#: Entries accepted in ``benchmarks``: far beyond any real schedule, small enough for one table.
MAX_BENCHMARK_ENTRIES = 10_000
_WHAT = "llama-benchy result"
#: The largest mean accepted (tokens/s or ms): far beyond any real figure, small enough that sums stay finite.
_MAX_RATE = 1e15


@dataclass(frozen=True)
class LlamaBenchyRow:
    """One ``benchmarks`` entry as a results table shows it (rates in tokens/s, ttft in ms)."""

    pp: int
    tg: int
    depth: int
    concurrency: int
    context_phase: bool
    pp_tokens_per_second: float | None
    tg_tokens_per_second: float | None
    ttft_ms: float | None


@dataclass(frozen=True)
class LlamaBenchyResult:
    """What a llama-benchy run measured.

    ``measured`` is false when there are no entries or no entry measured a
    throughput above zero: say so rather than show zeros. ``figures`` are flat
    scalars ready to be reported as metrics; ``rows`` are the entries in file order.
    """

    measured: bool
    benchmarks: int
    pp_tokens_per_second: float | None
    tg_tokens_per_second: float | None
    ttft_ms: float | None
    figures: dict[str, FigureValue]
    rows: tuple[LlamaBenchyRow, ...]


def read_llama_benchy_result(
    path: str | os.PathLike[str], *, limit: int = LLAMA_BENCHY_RESULT_LIMIT
) -> LlamaBenchyResult:
    """Read and check the result file at ``path``; raises ``ResultFileError`` naming file, field and value."""
    data = read_result_json(path, what=_WHAT, limit=limit)
    return summarize_llama_benchy(data, name=os.fspath(path))


def summarize_llama_benchy(data: Any, *, name: str = "result") -> LlamaBenchyResult:
    """The figures of an already decoded result (``name`` says where it came from in errors)."""
    check = ResultFields(_WHAT, name)
    top = check.mapping(data, "(top level)")
    if "benchmarks" not in top:
        raise check.invalid("benchmarks", None, "a JSON array (is this a --format json result?)")
    entries = check.array(top["benchmarks"], "benchmarks", limit=MAX_BENCHMARK_ENTRIES)
    rows = tuple(_row(check, entry, f"benchmarks[{index}]") for index, entry in enumerate(entries))
    headline = [row for row in rows if not row.context_phase]
    pp = _mean([row.pp_tokens_per_second for row in headline])
    tg = _mean([row.tg_tokens_per_second for row in headline])
    ttft = _mean([row.ttft_ms for row in headline])
    peaks = [_metric_mean(check, entry, "peak_throughput", f"benchmarks[{i}]") for i, entry in enumerate(entries)]
    peak = max((value for value in peaks if value is not None), default=None)
    optional: dict[str, FigureValue | None] = {
        "pp_tokens_per_second": pp,
        "tg_tokens_per_second": tg,
        "ttft_ms": ttft,
        "peak_tokens_per_second": peak,
        "latency_ms": _optional(check, top, "latency_ms", check.number),
        "max_concurrency": _optional(check, top, "max_concurrency", check.count),
        "latency_mode": _optional(check, top, "latency_mode", check.label),
        "model": _optional(check, top, "model", check.label),
        "version": _optional(check, top, "version", check.label),
    }
    figures: dict[str, FigureValue] = {"benchmarks": len(rows)}
    figures.update({key: value for key, value in optional.items() if value is not None})
    measured = any((row.pp_tokens_per_second or 0) > 0 or (row.tg_tokens_per_second or 0) > 0 for row in rows)
    return LlamaBenchyResult(
        measured=measured,
        benchmarks=len(rows),
        pp_tokens_per_second=pp,
        tg_tokens_per_second=tg,
        ttft_ms=ttft,
        figures=figures,
        rows=rows,
    )


def _row(check: ResultFields, entry: object, field: str) -> LlamaBenchyRow:
    item = check.mapping(entry, field)
    phase = item.get("is_context_prefill_phase", False)
    return LlamaBenchyRow(
        pp=check.count(item.get("prompt_size"), f"{field}.prompt_size"),
        tg=check.count(item.get("response_size"), f"{field}.response_size"),
        depth=check.count(item.get("context_size"), f"{field}.context_size"),
        concurrency=check.count(item.get("concurrency"), f"{field}.concurrency"),
        context_phase=check.flag(phase, f"{field}.is_context_prefill_phase"),
        pp_tokens_per_second=_metric_mean(check, item, "pp_throughput", field),
        tg_tokens_per_second=_metric_mean(check, item, "tg_throughput", field),
        ttft_ms=_metric_mean(check, item, "e2e_ttft", field),
    )


def _metric_mean(check: ResultFields, item: object, key: str, field: str) -> float | None:
    """The ``mean`` of a ``{mean, std, values}`` metric, ``None`` when the metric is null or absent."""
    metric = item.get(key) if type(item) is dict else None
    if metric is None:
        return None
    mean = check.mapping(metric, f"{field}.{key}").get("mean")
    return float(check.number(mean, f"{field}.{key}.mean", limit=_MAX_RATE))


def _mean(values: list[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


def _optional(
    check: ResultFields, top: dict[str, Any], key: str, kind: Callable[[object, str], FigureValue]
) -> FigureValue | None:
    value = top.get(key)
    return None if value is None else kind(value, key)
