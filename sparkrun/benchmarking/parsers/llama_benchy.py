"""Live request counts and rates of a llama-benchy attempt, from its ``--emit-progress`` events.

llama-benchy writes one JSON object per line, each with ``schema``
(``llama-benchy-progress.v1``), ``type`` and ``ts`` (Unix seconds):
``header`` {llama_benchy_version}, ``latency_measured`` {latency_s, mode},
``request_start`` {request_id, prompt_size, response_size, context_size,
concurrency, run_index, ...}, ``request_first_response`` {request_id,
ttfr_s}, ``request_first_token`` {request_id, ttft_s}, ``tokens``
{request_id, count, snippet, estimated?}, ``request_end`` {request_id,
total_tokens, prompt_tokens, decode_seconds, error} and ``bench_complete``
{status: ok, interrupted or error}. Warm-up requests are not reported by the tool.

Counters: unit ``requests``, ``current`` the finished requests. The tool never
announces how many requests a run makes, so the total is always ``unknown``.
Stages: ``preparation`` (tokenizer, corpus, warm-up, coherence test, latency
probe) -> ``requests`` (from the first request) -> ``finalization``
(``bench_complete`` and the terminal report).

Not every event is reported: the first request of each test (prompt size,
generated tokens, depth, concurrency), each batch that finished (no request in
flight), failed requests (as warnings, within a notice budget), the latency
probe and ``bench_complete`` are; otherwise at most one report per
``report_interval`` seconds of the tool's own clock (``ts``). Token snippets
(model output) never leave the parser. Memory is a fixed set of counters.
"""

from __future__ import annotations

from math import isfinite
from typing import Any

from sparkrun.benchmarking.foreign_input import printable
from sparkrun.benchmarking.parsers.base import Fields, MetricValue
from sparkrun.benchmarking.parsers.line_events import EventLineParser, NoticeBudget, accepted, count, number, text
from sparkrun.benchmarking.results.llama_benchy import LlamaBenchyResult, summarize_llama_benchy
from sparkrun.core.envelope import INT64_MAX
from sparkrun.core.events import Level
from sparkrun.core.short_repr import short_repr

__all__ = ["PROGRESS_SCHEMA", "LlamaBenchyParser"]

#: The progress schema this parser reads; another one is read the same way after one warning.
PROGRESS_SCHEMA = "llama-benchy-progress.v1"
_TOOL = "llama-benchy"
_MAX_SIZE = 1_000_000_000  # tokens, requests
_MAX_CHUNK = 1_000_000  # tokens in one ``tokens`` event
_MAX_SECONDS = 1_000_000.0
_MAX_TS = 1e11  # Unix seconds: year 5138
_TEST_FIELDS = ("prompt_size", "response_size", "context_size", "concurrency")


class LlamaBenchyParser(EventLineParser):
    """Reads one llama-benchy attempt's progress events."""

    tool = _TOOL

    def __init__(self, *, source: str = "benchmark.llama-benchy", report_interval: float = 1.0) -> None:
        if type(report_interval) not in (int, float) or not 0 <= report_interval <= 3600:
            raise ValueError(f"report_interval is {report_interval!r}; it must be 0 to 3600 seconds")
        super().__init__("type")
        self.source = source
        self._interval = float(report_interval)
        self._failures = NoticeBudget()
        self._stage = "preparation"
        self._schema_warned = False
        self._started = self._finished = self._failed = 0
        self._streamed = self._generated = self._prompt = self._decode_tokens = 0
        self._decode_seconds = self._ttft_sum = 0.0
        self._ttft_count = 0
        self._first_ts: float | None = None
        self._last_ts: float | None = None
        self._reported_ts: float | None = None
        self._latency_ms: float | None = None
        self._test: tuple[int, ...] | None = None

    def start(self) -> Fields:
        return self._report(f"{_TOOL} is preparing (tokenizer, corpus, warm-up, latency probe)")

    def finish(self, result: Any, *, success: bool) -> Fields:
        self._stage = "finalization"
        summary, problem = accepted(result, LlamaBenchyResult, summarize_llama_benchy)
        done = f"{self._finished} requests"
        level: Level = "progress"
        if not success:
            level, message = "error", f"{_TOOL} failed after {done}"
        elif problem:
            level, message = "warning", f"{_TOOL} finished ({done}), but its result is unusable: {problem}"
        elif summary is not None and summary.measured:
            message = f"{_TOOL} finished: {_headline(summary)} ({_entries(summary.benchmarks)}, {done})"
        elif summary is None and self._finished:
            message = f"{_TOOL} finished ({done}; no result to reconcile with)"
        else:
            level, message = "warning", f"{_TOOL} finished but measured nothing ({_nothing(summary)}, {done})"
        if not success and problem:
            message += f"; its result is unusable: {problem}"
        fields = self._report(message, level=level, figures=summary.figures if summary else None)
        fields["status"] = "succeeded" if success else "failed"
        return fields

    # -- events --------------------------------------------------------------------------

    def _event(self, event: dict[str, Any]) -> Fields | None:
        kind = event["type"]
        schema = event.get("schema")
        note = ""
        if type(schema) is str and schema != PROGRESS_SCHEMA and not self._schema_warned:
            self._schema_warned = True
            note = f" (progress schema {printable(schema, 80)} is not {PROGRESS_SCHEMA}; read as that)"
        ts = number(event.get("ts"), _MAX_TS)
        if ts is not None:
            self._last_ts = ts if self._last_ts is None else max(self._last_ts, ts)
        handler = _HANDLERS.get(kind)
        fields = handler(self, event, ts) if handler is not None else None
        if not note:
            return fields
        if fields is None:
            return self._report(f"{_TOOL} events{note}", level="warning")
        fields["message"] += note
        fields["level"] = "warning"
        return fields

    def _header(self, event: dict[str, Any], ts: float | None) -> Fields:
        version = text(event.get("llama_benchy_version"), 80)
        return self._report(f"{_TOOL} {version or '(unknown version)'} started", level="info", ts=ts)

    def _latency(self, event: dict[str, Any], ts: float | None) -> Fields | None:
        latency = number(event.get("latency_s"), _MAX_SECONDS)
        if latency is None:
            return self._invalid(event, "latency_s", "type")
        self._latency_ms = latency * 1000
        mode = text(event.get("mode"), 40)
        return self._report(f"Measured latency {self._latency_ms:.2f} ms ({mode or 'unknown mode'})", ts=ts)

    def _request_start(self, event: dict[str, Any], ts: float | None) -> Fields | None:
        sizes: list[int] = []
        for key in _TEST_FIELDS:
            value = count(event.get(key), _MAX_SIZE)
            if value is None:
                return self._invalid(event, key, "type")
            sizes.append(value)
        test = tuple(sizes)
        self._started += 1
        self._stage = "requests"
        if self._first_ts is None and ts is not None:
            self._first_ts = ts
        if test != self._test:
            self._test = test
            pp, tg, depth, concurrency = test
            return self._report(f"Running pp={pp} tg={tg} depth={depth} concurrency={concurrency}", ts=ts)
        return self._progress(ts)

    def _first_token(self, event: dict[str, Any], ts: float | None) -> Fields | None:
        ttft = number(event.get("ttft_s"), _MAX_SECONDS)
        if ttft is None:
            return self._invalid(event, "ttft_s", "type")
        self._ttft_sum += ttft
        self._ttft_count += 1
        return self._progress(ts)

    def _tokens(self, event: dict[str, Any], ts: float | None) -> Fields | None:
        chunk = count(event.get("count"), _MAX_CHUNK)
        if chunk is None:
            return self._invalid(event, "count", "type")
        self._streamed += chunk
        return self._progress(ts)

    def _request_end(self, event: dict[str, Any], ts: float | None) -> Fields | None:
        generated = count(event.get("total_tokens"), _MAX_SIZE)
        if generated is None:
            return self._invalid(event, "total_tokens", "type")
        prompt = count(event.get("prompt_tokens"), _MAX_SIZE)
        if prompt is None:
            return self._invalid(event, "prompt_tokens", "type")
        decode = number(event.get("decode_seconds"), _MAX_SECONDS)
        if decode is None:
            return self._invalid(event, "decode_seconds", "type")
        self._finished += 1
        self._generated += generated
        self._prompt += prompt
        if decode > 0:
            self._decode_tokens += generated
            self._decode_seconds += decode
        error = event.get("error")
        if error:
            self._failed += 1
            if self._failures.admit():
                detail = text(error, 1000) if type(error) is str else short_repr(error)
                return self._report(f"A {_TOOL} request failed: {detail}", level="warning", ts=ts)
        if self._started <= self._finished:
            return self._report(self._summary_text(), ts=ts)  # a batch finished
        return self._progress(ts)

    def _complete(self, event: dict[str, Any], ts: float | None) -> Fields:
        self._stage = "finalization"
        status = text(event.get("status"), 40) or "unknown"
        if status == "ok":
            return self._report(f"{_TOOL} finished its requests: {self._summary_text()}", ts=ts)
        return self._report(f"{_TOOL} stopped ({status}): {self._summary_text()}", level="warning", ts=ts)

    # -- reports -------------------------------------------------------------------------

    def _progress(self, ts: float | None) -> Fields | None:
        due = ts is not None and (self._reported_ts is None or ts - self._reported_ts >= self._interval)
        return self._report(self._summary_text(), ts=ts) if due else None

    def _summary_text(self) -> str:
        in_flight = max(self._started - self._finished, 0)
        message = f"{self._finished} request{'' if self._finished == 1 else 's'} finished, {in_flight} in flight"
        if self._failed:
            message += f", {self._failed} failed"
        rate = self._output_rate()
        return message + (f", {rate:.1f} tokens/s" if rate is not None else "")

    def _output_rate(self) -> float | None:
        if self._first_ts is None or self._last_ts is None or self._last_ts <= self._first_ts:
            return None
        return _finite(self._streamed / (self._last_ts - self._first_ts))

    def _report(
        self,
        message: str,
        *,
        level: Level = "progress",
        ts: float | None = None,
        figures: dict[str, Any] | None = None,
    ) -> Fields:
        if ts is not None:
            self._reported_ts = ts
        metrics: dict[str, MetricValue] = {
            "requests_started": min(self._started, INT64_MAX),
            "requests_finished": min(self._finished, INT64_MAX),
            "requests_failed": min(self._failed, INT64_MAX),
            "requests_in_flight": max(self._started - self._finished, 0),
            "streamed_tokens": min(self._streamed, INT64_MAX),
            "generated_tokens": min(self._generated, INT64_MAX),
            "prompt_tokens": min(self._prompt, INT64_MAX),
        }
        optional: dict[str, float | int | None] = {
            "output_tokens_per_second": self._output_rate(),
            "decode_tokens_per_second": _finite(self._decode_tokens / self._decode_seconds)
            if self._decode_seconds
            else None,
            "mean_ttft_ms": self._ttft_sum / self._ttft_count * 1000 if self._ttft_count else None,
            "latency_ms": self._latency_ms,
            "ignored_lines": self._bad_lines.seen or None,
        }
        if self._test is not None:
            optional.update(zip(("pp", "tg", "depth", "concurrency"), self._test, strict=True))
        metrics.update((key, value) for key, value in optional.items() if value is not None)
        if figures:
            metrics.update(figures)
        return {
            "message": message,
            "level": level,
            "stage": self._stage,
            "status": "running",
            "unit": "requests",
            "current": min(self._finished, INT64_MAX),
            "total_kind": "unknown",
            "metrics": metrics,
        }


_HANDLERS = {
    "header": LlamaBenchyParser._header,
    "latency_measured": LlamaBenchyParser._latency,
    "request_start": LlamaBenchyParser._request_start,
    "request_first_token": LlamaBenchyParser._first_token,
    "tokens": LlamaBenchyParser._tokens,
    "request_end": LlamaBenchyParser._request_end,
    "bench_complete": LlamaBenchyParser._complete,
}


def _nothing(summary: LlamaBenchyResult | None) -> str:
    if summary is None:
        return "no result"
    return "no benchmark entries" if not summary.benchmarks else "no throughput above zero"


def _headline(summary: LlamaBenchyResult) -> str:
    parts = [
        f"{name} {value:.1f} {unit}"
        for name, value, unit in (
            ("pp", summary.pp_tokens_per_second, "tokens/s"),
            ("tg", summary.tg_tokens_per_second, "tokens/s"),
            ("ttft", summary.ttft_ms, "ms"),
        )
        if value is not None
    ]
    return ", ".join(parts) or "measured"


def _finite(rate: float) -> float | None:
    """A rate, or None when a tiny duration made it overflow (a denormal ``decode_seconds``, say)."""
    return rate if isfinite(rate) else None


def _entries(benchmarks: int) -> str:
    return "1 benchmark entry" if benchmarks == 1 else f"{benchmarks} benchmark entries"
