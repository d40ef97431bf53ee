"""A library consumer: run a pipeline as one operation and print every event.

Events arrive on a queue (the subscriber must return promptly) and a
separate thread prints them as they come, the way a frontend would. The
operation is also exported as an OpenTelemetry trace (to the OTLP endpoint of
the environment, else the local trace store); `sparkrun trace show latest`
then shows it. Pass --no-otel to skip that, --json for raw envelopes.
Piped into a reader that leaves early (`| head`), it stops printing but lets
the operation finish, then exits quietly.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path
from queue import SimpleQueue

from sparkrun.application import initialize
from sparkrun.cli.render import describe_event
from sparkrun.core.operation import operation_scope

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_plugin import relay_image

_DONE = object()


class _Output:
    """stdout until its reader leaves, then nothing (the operation still runs to its end)."""

    gone = False

    def print(self, text: str) -> None:
        if self.gone:
            return
        try:
            print(text, flush=True)
        except BrokenPipeError:
            self.gone = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error when Python flushes at exit


_out = _Output()


def _print_events(queue: SimpleQueue, as_json: bool) -> None:
    while (event := queue.get()) is not _DONE:
        _out.print(json.dumps(event) if as_json else describe_event(event))


def main(as_json: bool = False, with_otel: bool = True) -> str:
    sctx = initialize()
    if with_otel:
        import otel

        telemetry = otel.configure(state_dir=sctx.config.state_dir)
        otel.SparkrunInstrumentor().instrument(
            tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
        )
    event_queue = SimpleQueue()
    sctx.events = event_queue.put
    printer = threading.Thread(target=_print_events, args=(event_queue, as_json))
    printer.start()
    try:
        with operation_scope(sctx, name="relay") as operation:
            relay_image(sctx)
    finally:
        event_queue.put(_DONE)
        printer.join()
    _out.print(f"operation {operation.operation_id}: {operation.outcome}")
    if with_otel:
        telemetry.shutdown()  # bounded: at most 2 s even if a collector is unreachable
        _out.print(f"trace exported to {telemetry.destination}")
    return operation.operation_id


if __name__ == "__main__":
    # The application owns logging; sparkrun never configures it for a library user.
    logging.basicConfig(level=logging.ERROR)
    main(as_json="--json" in sys.argv[1:], with_otel="--no-otel" not in sys.argv[1:])
    sys.exit(141 if _out.gone else 0)  # 128 + SIGPIPE when the reader left, as piped tools report it
