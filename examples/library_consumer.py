"""A library consumer: run a pipeline as one operation and print every event.

Events arrive on a queue (the subscriber must return promptly) and a
separate thread prints them as they come, the way a frontend would.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path
from queue import SimpleQueue

from sparkrun.application import initialize
from sparkrun.core.operation import operation_scope

sys.path.insert(0, str(Path(__file__).resolve().parent))
from producer_plugin import relay_image

_DONE = object()


def _describe(event: dict) -> str:
    if event["type"] != "feedback":
        return f"{event['level']:<8} {event['source']}: {event['message']}"
    who = event["source"] + (f"@{event['host']}" if "host" in event else "")
    where = "/".join(part for part in (event.get("stage"), event.get("status")) if part)
    counter = ""
    if "current" in event:
        bound = {"exact": "", "upper_bound": "<=", "unknown": "?"}[event["total_kind"]]
        total = f"{event['total']:,}" if "total" in event else ""
        counter = f" [{event['current']:,}/{bound}{total} {event.get('unit', '')}]".replace("/?", "")
    return f"{event['level']:<8} {who:<18} {where:<19} {event['message']}{counter}"


def _print_events(queue: SimpleQueue, as_json: bool) -> None:
    while (event := queue.get()) is not _DONE:
        print(json.dumps(event) if as_json else _describe(event), flush=True)


def main(as_json: bool = False) -> str:
    sctx = initialize()
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
    print(f"operation {operation.operation_id}: {operation.outcome}", flush=True)
    return operation.operation_id


if __name__ == "__main__":
    # The application owns logging; sparkrun never configures it for a library user.
    logging.basicConfig(level=logging.ERROR)
    main(as_json="--json" in sys.argv[1:])
