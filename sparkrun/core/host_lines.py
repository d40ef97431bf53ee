"""Lines from several hosts as one stream, each marked with its host.

Each host's lines are read by a thread of their own (a remote follow blocks
on its connection), and handed over through a bounded queue in arrival
order; a slow reader holds the hosts back instead of buffering without end.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator

__all__ = ["merge_lines"]

_DONE = object()


def merge_lines(sources: Iterable[tuple[str, Iterator[str]]], *, buffer: int = 1000) -> Iterator[str]:
    """``[host] line`` for every line of every source, as they arrive; ends when all sources have.

    A source that fails ends with one ``[host] (error: ...)`` line; the others go on.
    """
    lines: queue.Queue[object] = queue.Queue(maxsize=buffer)
    stopping = threading.Event()

    def read(host: str, source: Iterator[str]) -> None:
        try:
            for line in source:
                if stopping.is_set():
                    return
                lines.put(f"[{host}] {line}")
        except Exception as error:
            lines.put(f"[{host}] (error: {(str(error).splitlines() or [type(error).__name__])[0]})")
        finally:
            lines.put(_DONE)

    threads = [threading.Thread(target=read, args=pair, daemon=True) for pair in sources]
    for thread in threads:
        thread.start()
    remaining = len(threads)
    try:
        while remaining:
            item = lines.get()
            if item is _DONE:
                remaining -= 1
            else:
                yield str(item)
    finally:
        stopping.set()
        while remaining:  # let blocked readers finish their put and notice the stop
            try:
                if lines.get_nowait() is _DONE:
                    remaining -= 1
            except queue.Empty:
                break
