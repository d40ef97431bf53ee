"""Cost of a feedback report, each case against a like-for-like baseline measured in the same run.

(a) The default path: ``progress()`` delivers the envelope to one
    ``SimpleQueue.put`` subscriber *and* renders its log record through a
    handler on the reporter's logger (level enabled). Baseline: plain
    ``Logger.log`` of the same message at the same level, rendered through
    the same kind of handler, outside any operation (so no logging bridge).
    The handler formats every record and discards the text: the cost of a
    real handler without its I/O. Target: at most 1.3x the baseline.
(b) ``progress(log_message=False)``: delivery only. Baseline: the bare
    envelope floor, a copy of a prepared envelope dict, a timestamp and the
    same ``SimpleQueue.put``, with no validation, lock or logging. Target: at
    most 4 us per event (the ratio to the floor is printed for reference).

Rounds of all cases are interleaved and the best round of each is kept, so
a noisy neighbour disturbs every case alike. No thread may be started by
reporting. Exits 1 if a target is missed.
Usage: ``python benchmarks/bench_feedback.py [N]``.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from queue import SimpleQueue

from _table import Target, print_against, verdict

from sparkrun.application import initialize
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import FEEDBACK_API_VERSION, get_feedback

ROUNDS = 7
MESSAGE = "Receiving missing layers"
PROGRESS = 25

LOGGING = "baseline: Logger.log -> formatting handler"
FLOOR = "floor: dict copy + time() + SimpleQueue.put"
DEFAULT = "(a) progress(), record rendered"
UNLOGGED = "(b) progress(log_message=False)"
COUNTERS = "progress(log_message=False), stage+counters"


class _Render(logging.Handler):
    """Formats every record and drops the text: a real handler's work without its I/O."""

    def emit(self, record: logging.LogRecord) -> None:
        self.format(record)


def _logger(name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    logger.handlers[:] = [_Render()]
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    return logger


def main(n: int = 100_000) -> int:
    queue: SimpleQueue = SimpleQueue()
    sctx = initialize(state_dir="/tmp/sparkrun-bench", events=queue.put)
    baseline_logger = _logger("bench.baseline")
    _logger("bench.producer")  # the reporter's logger: same handler, level enabled

    def drain() -> None:
        while not queue.empty():
            queue.get()

    def baseline(count: int) -> None:
        log = baseline_logger.log
        for _ in range(count):
            log(PROGRESS, MESSAGE)

    def floor(count: int) -> None:
        envelope = {
            "type": "feedback",
            "feedback_version": FEEDBACK_API_VERSION,
            "operation_id": "0123456789abcdef0123456789abcdef",
            "timestamp": 0.0,
            "source": "bench.producer",
            "message": "",
            "level": "",
            "activity_id": "0123456789abcdef",
        }
        put, now = queue.put, time.time
        for _ in range(count):
            event = envelope.copy()
            event["timestamp"] = now()
            event["message"] = MESSAGE
            event["level"] = "progress"
            put(event)

    def in_operation(body: Callable[[Callable[..., object], int], None]) -> Callable[[int], None]:
        def run(count: int) -> None:
            with operation_scope(sctx, name="bench"):
                body(get_feedback("bench.producer").progress, count)

        return run

    def default(report: Callable[..., object], count: int) -> None:
        for _ in range(count):
            report(MESSAGE)

    def unlogged(report: Callable[..., object], count: int) -> None:
        for _ in range(count):
            report(MESSAGE, log_message=False)

    def counters(report: Callable[..., object], count: int) -> None:
        for i in range(count):
            report(
                MESSAGE, log_message=False, stage="transfer", current=i, total=count, total_kind="exact", unit="bytes"
            )

    cases: dict[str, Callable[[int], None]] = {
        LOGGING: baseline,
        DEFAULT: in_operation(default),
        FLOOR: floor,
        UNLOGGED: in_operation(unlogged),
        COUNTERS: in_operation(counters),
    }
    best = dict.fromkeys(cases, float("inf"))
    threads_before = threading.active_count()
    threads_after = threads_before
    for _ in range(ROUNDS):
        for name, run in cases.items():
            drain()
            started = time.perf_counter()
            run(n)
            best[name] = min(best[name], time.perf_counter() - started)
            threads_after = max(threads_after, threading.active_count())
    drain()
    results = {name: seconds / n * 1e6 for name, seconds in best.items()}

    print(f"feedback reports, best of {ROUNDS} interleaved rounds of {n:,}")
    print_against(results, {DEFAULT: LOGGING, UNLOGGED: FLOOR, COUNTERS: FLOOR})
    a = results[DEFAULT] / results[LOGGING]
    b = results[UNLOGGED]
    return verdict(
        [
            Target("(a) progress() <= 1.3x Logger.log", f"{a:.2f}x ({results[DEFAULT]:.2f} us)", a <= 1.3),
            Target(
                "(b) progress(log_message=False) <= 4 us",
                f"{b:.2f} us ({b / results[FLOOR]:.2f}x the floor)",
                b <= 4.0,
            ),
            Target(
                "no thread started by reporting", f"{threads_after - threads_before}", threads_after == threads_before
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000))
