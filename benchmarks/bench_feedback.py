"""Cost of a feedback report against a logging baseline measured in the same run.

Prints microseconds per event and the ratio to the baseline, which is
``logging.Logger.log`` of a record that is created and handed to a
``NullHandler``. Targets (issue 2): ``progress()`` with one
``SimpleQueue.put`` subscriber at most 0.6x the baseline and at most 6 us.
Exits 1 if a target is missed. Usage: ``python benchmarks/bench_feedback.py [N]``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue

from _table import print_ratios

from sparkrun.application import initialize
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback

ROUNDS = 7


def _per_event_us(loop: Callable[[int], None], n: int, reset: Callable[[], None]) -> float:
    """Best of several rounds, in microseconds per event (best = least disturbed by noise)."""
    best = float("inf")
    for _ in range(ROUNDS):
        reset()
        started = time.perf_counter()
        loop(n)
        best = min(best, time.perf_counter() - started)
    reset()
    return best / n * 1e6


def main(n: int = 100_000) -> int:
    baseline_logger = logging.getLogger("bench.baseline")
    baseline_logger.addHandler(logging.NullHandler())
    baseline_logger.setLevel(logging.DEBUG)
    baseline_logger.propagate = False

    def baseline(count: int) -> None:
        log = baseline_logger.log
        for _ in range(count):
            log(25, "Receiving missing layers")

    sctx = initialize(state_dir="/tmp/sparkrun-bench")
    queue: SimpleQueue = SimpleQueue()
    sctx.events = queue.put

    def drain() -> None:
        while not queue.empty():
            queue.get()

    results: dict[str, float] = {}
    threads_before = threading.active_count()
    with operation_scope(sctx, name="bench"):
        reporter = get_feedback("bench.producer")  # default logging: effective level WARNING > PROGRESS

        def progress(count: int) -> None:
            report = reporter.progress
            for _ in range(count):
                report("Receiving missing layers")

        def progress_unlogged(count: int) -> None:
            report = reporter.progress
            for _ in range(count):
                report("Receiving missing layers", log_message=False)

        def progress_counters(count: int) -> None:
            report = reporter.progress
            for i in range(count):
                report(
                    "Receiving missing layers",
                    stage="transfer",
                    current=i,
                    total=count,
                    total_kind="exact",
                    unit="bytes",
                )

        results["baseline: Logger.log -> NullHandler"] = _per_event_us(baseline, n, drain)
        results["progress() + SimpleQueue subscriber"] = _per_event_us(progress, n, drain)
        results["progress(log_message=False)"] = _per_event_us(progress_unlogged, n, drain)
        results["progress() with stage and counters"] = _per_event_us(progress_counters, n, drain)
        threads_during = threading.active_count()

    base = results["baseline: Logger.log -> NullHandler"]
    print_ratios(results, "baseline: Logger.log -> NullHandler")
    headline = results["progress() + SimpleQueue subscriber"]
    ok = headline / base <= 0.6 and headline <= 6.0 and threads_during == threads_before
    print(
        f"target: progress() <= 0.6x baseline and <= 6 us -> {headline / base:.3f}x, {headline:.3f} us; "
        f"threads started by reporting: {threads_during - threads_before} -> {'PASS' if ok else 'MISS'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
