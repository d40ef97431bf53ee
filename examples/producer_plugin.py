"""A plugin-style producer: relays an image to hosts and reports as it goes.

It shows what a plugin does with the feedback API: a stable ``source``,
stable ``stage`` identifiers, byte counters whose total is only an upper
bound, a heartbeat around silent work, a warning, a verified outcome, and
per-host child activities reporting from worker threads.

Run it on its own and nothing subscribes: the reporter only logs.
``library_consumer.py`` runs it inside an operation and prints the events.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from sparkrun.core.operation import submit
from sparkrun.plugins import FeedbackReporter, get_feedback

LAYER_BYTES = [1_048_576, 1_048_576, 524_288]
EXPECTED_BYTES = 4_194_304  # what the registry announced: an upper bound


def verify_image(seconds: float) -> None:
    """Stands in for a digest check that prints nothing while it runs."""
    time.sleep(seconds)


def _receive(receiver: FeedbackReporter, verify_seconds: float) -> None:
    received = 0
    started = time.monotonic()
    for layer, size in enumerate(LAYER_BYTES, start=1):
        time.sleep(0.05)
        received += size
        rate = received / max(time.monotonic() - started, 1e-6)
        receiver.progress(
            f"Receiving missing layers ({layer}/{len(LAYER_BYTES)})",
            stage="transfer",
            status="running",
            current=received,
            total=EXPECTED_BYTES,
            total_kind="upper_bound",
            unit="bytes",
            metrics={"bytes_per_second": round(rate), "reused_layers": 2},
        )
    # One activity per host: "succeeded" is reported once, when the whole activity is done.
    receiver.progress("Transfer complete", stage="transfer", current=received, unit="bytes")
    with receiver.heartbeat("Verifying image", interval=0.1):
        verify_image(verify_seconds)
    receiver.progress("Image verified", stage="verify", status="succeeded")


def relay_image(sctx=None, hosts: tuple[str, ...] = ("spark-1", "spark-2"), verify_seconds: float = 0.25) -> None:
    """Relay one image to ``hosts`` in parallel, one child activity per host."""
    feedback = get_feedback("my-plugin", sctx=sctx)
    feedback.progress(f"Relaying image to {len(hosts)} hosts", stage="plan", status="running")
    feedback.warning("Layer cache is 91% full; old layers will be evicted", stage="plan", metrics={"cache_used": 0.91})
    with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
        futures = [submit(pool, _receive, feedback.child(host=host), verify_seconds) for host in hosts]
        for future in futures:
            future.result()
    feedback.progress("Image relayed", stage="relay", status="succeeded", metrics={"hosts": len(hosts)})


if __name__ == "__main__":
    logging.basicConfig(level=25, format="%(levelname)s %(name)s: %(message)s")
    relay_image()
