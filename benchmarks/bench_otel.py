"""Cost of the OpenTelemetry adapter, as ratios against baselines measured in the same run.

The adapter is configured as in production: ``SparkrunInstrumentor().instrument(
tracer_provider=..., meter_provider=...)`` with a real SDK ``TracerProvider``
(``BatchSpanProcessor``, an exporter that discards) and a real SDK
``MeterProvider`` (an ``InMemoryMetricReader``, so instruments are real).
Every report has one ``SimpleQueue.put`` subscriber; each instrumented case
is compared with the same reports, uninstrumented, in the same run.

Cases:

- one long activity: ``progress()`` with a counter, thousands of reports on
  one span, most of them coalesced (issue 3). Targets: at most 2.5x and
  15 us per report; 100,000 reports grow resident memory by less than 20 MB.
- many short activities: a parent reporter and ``child()`` activities of 30
  reports each (stage, byte counters, a host), the last one a terminal
  ``succeeded`` status, so every activity is a span that starts and ends
  (issue 10). Its updates repeat one message with moved counters, as a
  transfer's do, so the mapper coalesces them: the first and last report are
  span events, the rest are counted. As in production (the CLI
  and the daemon's workers log at PROGRESS), each report also renders its
  log record, here through a handler with the CLI's format that discards
  the text. Targets: at most 2.5x and 12 us per report. The same case with
  the records disabled by level is printed too, for reference, and so is the
  worst case for the mapper: every report a new message, so every report is
  a span event (no target: it shows what coalescing saves).

Reference rows, the SDK alone through its public API: ``span.add_event``
on an open span; the span-start floor (``start_span`` with a parent context,
attributes and a start time, then ``end``), per span; and the SDK's share of
the short-activity case, per report: one such span per 30 reports, each
report an ``add_event`` with the same attributes the adapter records, the
final attributes set before ``end``.

Best of several rounds; before each round, untimed, the span processor's
queue is flushed and garbage is collected, so no round pays for what the
previous one left behind. Exits 1 if a target is missed.
Usage: ``python benchmarks/bench_otel.py [N]``.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from collections.abc import Callable
from queue import SimpleQueue

from _table import Target, print_against, verdict
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel import SparkrunInstrumentor
from otel.ids import OperationIdGenerator
from sparkrun.application import initialize
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback

ROUNDS = 7
REPORTS_PER_ACTIVITY = 30
HOSTS = ("spark-1", "spark-2", "spark-3", "spark-4")

LONG_PLAIN = "one activity: progress(), not instrumented"
LONG = "one activity: progress(), instrumented"
SHORT_PLAIN = "30-report activities: not instrumented"
SHORT = "30-report activities: instrumented"
QUIET_PLAIN = "same, records off: not instrumented"
QUIET = "same, records off: instrumented"
NEW_PLAIN = "30-report activities, every report new: not instrumented"
NEW = "30-report activities, every report new: instrumented"
ADD_EVENT = "SDK span.add_event (reference)"
SPAN_FLOOR = "SDK start_span + end, per span (reference)"
SDK_SHORT = "SDK alone, 30-event spans, per event (reference)"


class _Discard(SpanExporter):
    def export(self, spans):  # type: ignore[no-untyped-def]
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


class _Render(logging.Handler):
    """Formats every record as the CLI does and drops the text: a real handler's work without its I/O."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.format(record)


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _per_event_us(run: Callable[[int], None], n: int, settle: Callable[[], None]) -> float:
    """Best of several rounds; ``settle`` runs before each, untimed, so every round starts alike."""
    best = float("inf")
    for _ in range(ROUNDS):
        settle()
        started = time.perf_counter()
        run(n)
        best = min(best, time.perf_counter() - started)
    return best / n * 1e6


def _long_activity(sctx) -> Callable[[int], None]:  # type: ignore[no-untyped-def]
    def run(count: int) -> None:
        with operation_scope(sctx, name="bench"):
            report = get_feedback("bench.producer").progress
            for i in range(count):
                report("Receiving missing layers", current=i, unit="bytes")

    return run


def _short_activities(sctx, source: str, *, all_new: bool = False) -> Callable[[int], None]:  # type: ignore[no-untyped-def]
    """``count`` reports as ``count / 30`` child activities of one parent, each ending ``succeeded``.

    With ``all_new`` every report has its own message (nothing can be coalesced).
    """
    messages = [f"Received layer {i}" if all_new else "Receiving missing layers" for i in range(REPORTS_PER_ACTIVITY)]
    total = 1024 * REPORTS_PER_ACTIVITY

    def run(count: int) -> None:
        with operation_scope(sctx, name="bench"):
            parent = get_feedback(source)
            for number in range(count // REPORTS_PER_ACTIVITY):
                child = parent.child(host=HOSTS[number % len(HOSTS)])
                report = child.progress
                for i in range(REPORTS_PER_ACTIVITY - 1):
                    report(
                        messages[i],
                        stage="transfer",
                        current=i * 1024,
                        total=total,
                        total_kind="exact",
                        unit="bytes",
                    )
                report(
                    "Layers received",
                    stage="transfer",
                    current=total,
                    total=total,
                    total_kind="exact",
                    unit="bytes",
                    status="succeeded",
                )

    return run


def main(n: int = 30_000) -> int:
    n -= n % REPORTS_PER_ACTIVITY
    queue: SimpleQueue = SimpleQueue()
    sctx = initialize(state_dir="/tmp/sparkrun-bench", events=queue.put)

    def drained(run: Callable[[int], None]) -> Callable[[int], None]:
        def wrapped(count: int) -> None:
            run(count)
            while not queue.empty():
                queue.get()

        return wrapped

    rendered = logging.getLogger("bench.relay")  # records rendered, as the CLI configures logging
    rendered.handlers[:] = [_Render()]
    rendered.setLevel(logging.DEBUG)
    rendered.propagate = False
    logging.getLogger("bench.quiet").setLevel(logging.WARNING)  # records off by level

    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    provider = TracerProvider(shutdown_on_exit=False, id_generator=OperationIdGenerator())  # as otel.configure() does
    provider.add_span_processor(BatchSpanProcessor(_Discard()))
    tracer = provider.get_tracer("bench")

    def settle() -> None:
        """Export what the last round left queued and collect its garbage, outside the timing."""
        provider.force_flush()
        gc.collect()

    def sdk_add_event(count: int) -> None:
        span = tracer.start_span("baseline")
        add_event = span.add_event
        for i in range(count):
            add_event("sparkrun.feedback.progress", {"message": "Receiving missing layers", "sparkrun.current": i})
        span.end()

    def sdk_span_floor(count: int) -> None:
        parent = tracer.start_span("parent")
        start_span = tracer.start_span
        attributes = {"sparkrun.activity_id": "0123456789abcdef", "sparkrun.source": "bench.relay"}
        now = time.time_ns()
        for _ in range(count):
            start_span(
                "bench.relay", context=trace.set_span_in_context(parent), attributes=attributes, start_time=now
            ).end()
        parent.end()

    def sdk_short_activities(count: int) -> None:
        parent = tracer.start_span("parent")
        context = trace.set_span_in_context(parent)
        start_span = tracer.start_span
        total = 1024 * REPORTS_PER_ACTIVITY
        for number in range(count // REPORTS_PER_ACTIVITY):
            span = start_span(
                "bench.relay",
                context=context,
                attributes={
                    "sparkrun.activity_id": f"{number:016x}",
                    "sparkrun.source": "bench.relay",
                    "sparkrun.parent_id": "0123456789abcdef",
                    "host.name": HOSTS[number % len(HOSTS)],
                },
                start_time=time.time_ns(),
            )
            add_event = span.add_event
            for i in range(REPORTS_PER_ACTIVITY):
                attributes = {
                    "message": "Receiving missing layers",
                    "sparkrun.stage": "transfer",
                    "sparkrun.current": i * 1024,
                    "sparkrun.total": total,
                    "sparkrun.total_kind": "exact",
                    "sparkrun.unit": "bytes",
                }
                if i == REPORTS_PER_ACTIVITY - 1:
                    attributes["sparkrun.status"] = "succeeded"
                add_event("sparkrun.feedback.progress", attributes, time.time_ns())
            span.set_attributes(
                {
                    "sparkrun.stage": "transfer",
                    "sparkrun.status": "succeeded",
                    "sparkrun.current": total,
                    "sparkrun.total": total,
                    "sparkrun.total_kind": "exact",
                    "sparkrun.unit": "bytes",
                    "sparkrun.last_message": "Layers received",
                    "sparkrun.reports": REPORTS_PER_ACTIVITY,
                    "sparkrun.coalesced_events": 0,
                }
            )
            span.end()
        parent.end()

    results = {
        LONG_PLAIN: _per_event_us(drained(_long_activity(sctx)), n, settle),
        SHORT_PLAIN: _per_event_us(drained(_short_activities(sctx, "bench.relay")), n, settle),
        QUIET_PLAIN: _per_event_us(drained(_short_activities(sctx, "bench.quiet")), n, settle),
        NEW_PLAIN: _per_event_us(drained(_short_activities(sctx, "bench.relay", all_new=True)), n, settle),
        ADD_EVENT: _per_event_us(sdk_add_event, n, settle),
        SPAN_FLOOR: _per_event_us(sdk_span_floor, n // 10, settle),
        SDK_SHORT: _per_event_us(sdk_short_activities, n, settle),
    }
    instrumentor = SparkrunInstrumentor()
    instrumentor.instrument(tracer_provider=provider, meter_provider=meter_provider)
    try:
        results[LONG] = _per_event_us(drained(_long_activity(sctx)), n, settle)
        results[SHORT] = _per_event_us(drained(_short_activities(sctx, "bench.relay")), n, settle)
        results[QUIET] = _per_event_us(drained(_short_activities(sctx, "bench.quiet")), n, settle)
        results[NEW] = _per_event_us(drained(_short_activities(sctx, "bench.relay", all_new=True)), n, settle)
        gc.collect()
        before = _rss_bytes()
        with operation_scope(sctx, name="memory"):
            report = get_feedback("bench.memory").progress
            for i in range(100_000):
                report(
                    "Receiving missing layers",
                    current=i,
                    total=100_000,
                    total_kind="exact",
                    unit="bytes",
                    log_message=False,
                )
                if i % 10_000 == 0:
                    while not queue.empty():
                        queue.get()
            while not queue.empty():
                queue.get()
            gc.collect()
            grown = _rss_bytes() - before
        collected = reader.get_metrics_data()  # the instruments were real: something was recorded
        instruments = {
            metric.name
            for resource in (collected.resource_metrics if collected else ())
            for scope in resource.scope_metrics
            for metric in scope.metrics
        }
    finally:
        instrumentor.uninstrument()
        provider.shutdown()
        meter_provider.shutdown()

    print(f"OpenTelemetry adapter, best of {ROUNDS} rounds of {n:,} reports ({n // REPORTS_PER_ACTIVITY:,} activities)")
    print_against(results, {LONG: LONG_PLAIN, SHORT: SHORT_PLAIN, QUIET: QUIET_PLAIN, NEW: NEW_PLAIN})
    long_ratio, short_ratio = results[LONG] / results[LONG_PLAIN], results[SHORT] / results[SHORT_PLAIN]
    return verdict(
        [
            Target("one activity <= 2.5x", f"{long_ratio:.2f}x", long_ratio <= 2.5),
            Target("one activity <= 15 us", f"{results[LONG]:.2f} us", results[LONG] <= 15),
            Target("RSS growth for 100,000 reports < 20 MB", f"{grown / 2**20:.1f} MB", grown < 20 * 2**20),
            Target("short activities <= 2.5x", f"{short_ratio:.2f}x", short_ratio <= 2.5),
            Target("short activities <= 12 us", f"{results[SHORT]:.2f} us", results[SHORT] <= 12),
            Target(
                "activity durations recorded by the real meter",
                ", ".join(sorted(instruments)) or "nothing",
                "sparkrun.activity.duration" in instruments,
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 30_000))
