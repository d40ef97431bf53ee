"""llama-benchy: request counts, rates and stages from --emit-progress events, report by report."""

from __future__ import annotations

import pytest

from sparkrun.benchmarking.parsers import LlamaBenchyParser
from sparkrun.benchmarking.results import summarize_llama_benchy
from tests.unit.benchmarking.conftest import counters, delivering
from tests.unit.benchmarking.streams import (
    lb,
    lb_end,
    lb_entry,
    lb_header,
    lb_result,
    lb_start,
    lb_tokens,
)


def one_batch(t0: float = 1000.0):
    """Two concurrent requests of pp=512 tg=32, three tokens each (ts from ``t0``)."""
    return [
        lb_header(t0),
        lb("latency_measured", t0 + 0.1, latency_s=0.0009, mode="api"),
        lb_start(0, t0 + 0.2),
        lb_start(1, t0 + 0.2),
        lb("request_first_response", t0 + 0.3, request_id=0, ttfr_s=0.1),
        lb("request_first_token", t0 + 0.3, request_id=0, ttft_s=0.1),
        lb_tokens(0, t0 + 0.3),
        lb("request_first_token", t0 + 0.4, request_id=1, ttft_s=0.2),
        lb_tokens(1, t0 + 0.4, count=2),
        lb_tokens(0, t0 + 0.5, count=2),
        lb_end(0, t0 + 1.2, tokens=3, decode=0.5),
        lb_tokens(1, t0 + 1.3),
        lb_end(1, t0 + 1.4, tokens=3, decode=1.0),
        lb("bench_complete", t0 + 1.5, status="ok"),
    ]


def test_a_realistic_stream_reports_stage_changes_and_finished_batches(context):
    with delivering(context, LlamaBenchyParser(report_interval=3600)) as run:
        first = run.start()
        answers = run.feed_all(one_batch())
        last = run.finish(lb_result([lb_entry()]), success=True)
    assert first["source"] == "benchmark.llama-benchy"
    assert counters(first) == ("preparation", 0, None, "unknown", "requests", "running")
    reported = [(index, counters(event)[:2], event["message"]) for index, event in enumerate(answers) if event]
    assert reported == [
        (0, ("preparation", 0), "llama-benchy 0.4.0 started"),
        (1, ("preparation", 0), "Measured latency 0.90 ms (api)"),
        (2, ("requests", 0), "Running pp=512 tg=32 depth=0 concurrency=2"),
        (12, ("requests", 2), "2 requests finished, 0 in flight, 5.0 tokens/s"),  # 6 tokens in 1.2 s
        (13, ("finalization", 2), "llama-benchy finished its requests: 2 requests finished, 0 in flight, 4.6 tokens/s"),
    ]
    assert all(event["total_kind"] == "unknown" and "total" not in event for event in answers if event)
    assert counters(last) == ("finalization", 2, None, "unknown", "requests", "succeeded")
    assert last["message"] == (
        "llama-benchy finished: pp 1000.0 tokens/s, tg 50.0 tokens/s, ttft 125.0 ms (1 benchmark entry, 2 requests)"
    )


def test_rates_so_far_come_from_the_events_own_numbers(context):
    with delivering(context, LlamaBenchyParser(report_interval=3600)) as run:
        answers = run.feed_all(one_batch())
    metrics = answers[12]["metrics"]
    assert metrics["requests_started"] == 2 and metrics["requests_finished"] == 2 and metrics["requests_in_flight"] == 0
    assert metrics["streamed_tokens"] == 6 and metrics["generated_tokens"] == 6 and metrics["prompt_tokens"] == 1024
    assert metrics["output_tokens_per_second"] == pytest.approx(6 / 1.2)  # first request_start to the latest event
    assert metrics["decode_tokens_per_second"] == pytest.approx(6 / 1.5)  # tokens over summed decode seconds
    assert metrics["mean_ttft_ms"] == pytest.approx(150.0)
    assert metrics["latency_ms"] == pytest.approx(0.9)
    assert (metrics["pp"], metrics["tg"], metrics["depth"], metrics["concurrency"]) == (512, 32, 0, 2)
    assert all("snippet" not in key for key in metrics)


def test_repeated_counters_are_throttled_by_the_tools_clock(context):
    lines = [lb_start(0, 100.0, concurrency=1)] + [lb_tokens(0, 100.0 + step * 0.25) for step in range(1, 13)]
    with delivering(context, LlamaBenchyParser(report_interval=1.0)) as run:
        answers = run.feed_all(lines)
    reported_at = [100.0 + index * 0.25 for index, event in enumerate(answers) if event]
    assert reported_at == [100.0, 101.0, 102.0, 103.0]
    assert [event["metrics"]["streamed_tokens"] for event in answers if event] == [0, 4, 8, 12]


def test_each_new_test_is_announced(context):
    lines = [
        lb_start(0, 1.0, concurrency=1),
        lb_end(0, 2.0),
        lb_start(1, 3.0, concurrency=1),
        lb_end(1, 4.0),
        lb_start(2, 5.0, depth=4096, concurrency=1),
    ]
    with delivering(context, LlamaBenchyParser(report_interval=3600)) as run:
        answers = run.feed_all(lines)
    assert [event and event["message"] for event in answers] == [
        "Running pp=512 tg=32 depth=0 concurrency=1",
        "1 request finished, 0 in flight, 0.0 tokens/s",
        None,
        "2 requests finished, 0 in flight, 0.0 tokens/s",
        "Running pp=512 tg=32 depth=4096 concurrency=1",
    ]


def test_failed_requests_are_warnings_within_a_budget(context):
    lines = []
    for request in range(20):
        lines += [lb_start(request, 1.0, concurrency=20)]
    lines += [lb_end(request, 2.0, tokens=0, decode=0.0, error="HTTP 500: \x1b[31mboom") for request in range(20)]
    with delivering(context, LlamaBenchyParser(report_interval=3600)) as run:
        answers = run.feed_all(lines)
        last = run.finish(None, success=False)
    warnings = [event for event in answers if event and event["level"] == "warning"]
    assert len(warnings) == 6  # failures 1-5 and the 10th
    assert warnings[0]["message"] == "A llama-benchy request failed: HTTP 500: \ufffd[31mboom"
    assert answers[-1]["message"] == "20 requests finished, 0 in flight, 20 failed, 0.0 tokens/s"
    assert counters(last) == ("finalization", 20, None, "unknown", "requests", "failed")
    assert last["level"] == "error" and last["message"] == "llama-benchy failed after 20 requests"
    assert last["metrics"]["requests_failed"] == 20


def test_an_unknown_schema_is_read_after_one_warning(context):
    other = '{"schema":"llama-benchy-progress.v2","type":"header","ts":1.0,"llama_benchy_version":"0.5.0"}'
    with delivering(context, LlamaBenchyParser()) as run:
        answers = run.feed_all([other, other])
    assert answers[0]["level"] == "warning"
    assert answers[0]["message"] == (
        "llama-benchy 0.5.0 started (progress schema llama-benchy-progress.v2 is not llama-benchy-progress.v1; "
        "read as that)"
    )
    assert answers[1]["level"] == "info"


def test_an_interrupted_run_is_a_warning(context):
    with delivering(context, LlamaBenchyParser()) as run:
        event = run.feed(lb("bench_complete", 5.0, status="interrupted"))
    assert event["level"] == "warning" and event["stage"] == "finalization"
    assert event["message"] == "llama-benchy stopped (interrupted): 0 requests finished, 0 in flight"


@pytest.mark.parametrize(
    ("result", "why"),
    [
        (lb_result([]), "no benchmark entries"),
        (lb_result([{**lb_entry(), "pp_throughput": None, "tg_throughput": None}]), "no throughput above zero"),
        (lb_result([lb_entry(scale=0.0)]), "no throughput above zero"),
    ],
)
def test_success_that_measured_nothing_says_so(context, result, why):
    with delivering(context, LlamaBenchyParser()) as run:
        last = run.finish(result, success=True)
    assert last["level"] == "warning" and last["status"] == "succeeded"
    assert last["message"] == f"llama-benchy finished but measured nothing ({why}, 0 requests)"


def test_the_result_figures_become_final_metrics(context):
    summary = summarize_llama_benchy(lb_result([lb_entry(), lb_entry(pp=2048, scale=0.5)]))
    with delivering(context, LlamaBenchyParser()) as run:
        last = run.finish(summary, success=True)
    metrics = last["metrics"]
    assert metrics["benchmarks"] == 2
    assert metrics["pp_tokens_per_second"] == pytest.approx(750.0)
    assert metrics["tg_tokens_per_second"] == pytest.approx(37.5)
    assert metrics["model"] == "stub"


def test_an_unusable_result_is_a_warning(context):
    with delivering(context, LlamaBenchyParser()) as run:
        last = run.finish({"benchmarks": [{"prompt_size": "512"}]}, success=True)
    assert last["level"] == "warning"
    assert last["message"] == (
        "llama-benchy finished (0 requests), but its result is unusable: llama-benchy result has an invalid field "
        "(path=result, field=benchmarks[0].prompt_size, value='512'; expected an integer from 0 to 9223372036854775807)"
    )


@pytest.mark.parametrize("interval", [-1, 3601, float("nan"), "1", None])
def test_report_interval_is_checked(interval):
    with pytest.raises(ValueError, match=r"^report_interval is .*; it must be 0 to 3600 seconds$"):
        LlamaBenchyParser(report_interval=interval)
