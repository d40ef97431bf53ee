"""Cost of the OpenTelemetry adapter, as ratios against baselines measured in the same run.

Cases: ``progress()`` with one ``SimpleQueue.put`` subscriber, without and with
the instrumentor (BatchSpanProcessor, an exporter that discards), and the bare
SDK ``span.add_event`` as a reference. Targets (issue 3): instrumented at most
2.5x uninstrumented and at most 15 us per event; 100,000 reports on one
activity grow resident memory by less than 20 MB. Exits 1 if a target is missed.
Usage: ``python benchmarks/bench_otel.py [N]``.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from queue import SimpleQueue

from _table import print_ratios
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from otel import SparkrunInstrumentor
from sparkrun.application import initialize
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback

ROUNDS = 7


class _Discard(SpanExporter):
    def export(self, spans):  # type: ignore[no-untyped-def]
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _rss_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _per_event_us(run: Callable[[int], None], n: int) -> float:
    best = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        run(n)
        best = min(best, time.perf_counter() - started)
    return best / n * 1e6


def _progress_loop(sctx) -> Callable[[int], None]:  # type: ignore[no-untyped-def]
    def run(count: int) -> None:
        with operation_scope(sctx, name="bench"):
            report = get_feedback("bench.producer").progress
            for i in range(count):
                report("Receiving missing layers", current=i, unit="bytes")

    return run


def main(n: int = 50_000) -> int:
    queue: SimpleQueue = SimpleQueue()
    sctx = initialize(state_dir="/tmp/sparkrun-bench", events=queue.put)

    def drained(run: Callable[[int], None]) -> Callable[[int], None]:
        def wrapped(count: int) -> None:
            run(count)
            while not queue.empty():
                queue.get()

        return wrapped

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(_Discard()))
    tracer = provider.get_tracer("bench")

    def sdk_add_event(count: int) -> None:
        span = tracer.start_span("baseline")
        add_event = span.add_event
        for i in range(count):
            add_event("sparkrun.feedback.progress", {"message": "Receiving missing layers", "sparkrun.current": i})
        span.end()

    results = {
        "progress(), not instrumented": _per_event_us(drained(_progress_loop(sctx)), n),
        "SDK span.add_event (reference)": _per_event_us(sdk_add_event, n),
    }
    instrumentor = SparkrunInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        results["progress(), instrumented"] = _per_event_us(drained(_progress_loop(sctx)), n)
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
    finally:
        instrumentor.uninstrument()
        provider.shutdown()

    plain = results["progress(), not instrumented"]
    print_ratios(results, "progress(), not instrumented")
    instrumented = results["progress(), instrumented"]
    ratio = instrumented / plain
    ok = ratio <= 2.5 and instrumented <= 15 and grown < 20 * 2**20
    print(
        f"targets: instrumented <= 2.5x and <= 15 us -> {ratio:.2f}x, {instrumented:.2f} us; "
        f"RSS growth for 100,000 reports < 20 MB -> {grown / 2**20:.1f} MB; {'PASS' if ok else 'MISS'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000))
