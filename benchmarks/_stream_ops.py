"""The ``pace`` daemon operation used by ``bench_stream.py`` to measure emit-to-client latency.

Each event carries the wall-clock time it was emitted (``metrics.sent_at``), so a
stream client on the same machine can compute receive time minus emit time. The
benchmark loads this module as a daemon plugin (``daemon.plugins: [_stream_ops]``)
with this directory on ``PYTHONPATH``.
"""

from __future__ import annotations

import time
from typing import Any

from sparkrun.core.context import SparkrunContext
from sparkrun.daemon.operations import DaemonOperation, Param, Prompter, register_operation
from sparkrun.feedback import get_feedback


def _pace(sctx: SparkrunContext, arguments: dict[str, Any], prompter: Prompter) -> dict[str, Any]:
    """Wait ``delay`` seconds (so the client can subscribe), then emit ``count`` events ``interval`` apart."""
    feedback = get_feedback("bench.pace", sctx=sctx)
    count = int(arguments.get("count") or 500)
    interval = float(arguments.get("interval") or 0.002)
    time.sleep(float(arguments.get("delay") or 0.0))
    next_at = time.perf_counter()
    for index in range(count):
        feedback.progress(
            "pace", current=index, total=count, total_kind="exact", metrics={"sent_at": time.time()}, log_message=False
        )
        next_at += interval
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    return {"count": count}


register_operation(
    DaemonOperation(
        "pace",
        _pace,
        {"count": Param(int), "interval": Param(float), "delay": Param(float)},
        "Emit events at a steady pace, each carrying its emit time (benchmark).",
    )
)
