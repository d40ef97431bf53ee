"""Lines of several hosts merged as they arrive, each marked with its host."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from sparkrun.core.host_lines import merge_lines


def test_every_line_marked_and_order_kept_per_host():
    merged = list(merge_lines([("a", iter(["1", "2", "3"])), ("b", iter(["x", "y"]))]))
    assert sorted(merged) == sorted(["[a] 1", "[a] 2", "[a] 3", "[b] x", "[b] y"])
    assert [line for line in merged if line.startswith("[a]")] == ["[a] 1", "[a] 2", "[a] 3"]


def test_a_failing_source_ends_with_its_reason_and_the_others_go_on():
    def broken() -> Iterator[str]:
        yield "before"
        raise OSError("connection lost\nsecond line")

    merged = list(merge_lines([("bad", broken()), ("good", iter(["fine"]))]))
    assert "[bad] before" in merged and "[bad] (error: connection lost)" in merged and "[good] fine" in merged


def test_a_slow_host_does_not_hold_back_a_fast_one():
    release = threading.Event()

    def slow() -> Iterator[str]:
        release.wait(10)
        yield "late"

    merged = merge_lines([("slow", slow()), ("fast", iter(["early"]))])
    assert next(merged) == "[fast] early"
    release.set()
    assert list(merged) == ["[slow] late"]
