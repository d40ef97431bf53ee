"""A benchmark framework plugin in one file, and the fake tool it schedules.

It shows what a plugin provides (tasks from a schedule, a command per task,
a progress parser, a result reader) without a real tool, so sparkrun's
tests and ``benchmarks/bench_benchmarks.py`` can drive every path: a tool
that succeeds, crashes, measures nothing, hangs, or floods stderr with
progress lines (some hostile). Register it with::

    from sparkrun.benchmarking.framework import register_framework
    register_framework(FakeFramework())

list this module under ``benchmark.plugins`` (and ``daemon.plugins``) in the
configuration, with its folder on ``PYTHONPATH``: importing it registers it.
A distribution advertises its frameworks under the
``sparkrun.benchmark_frameworks`` entry point group instead.
Run as a script, this file is the tool: ``python fake_framework.py --result F
--lines N --mode ok|crash|nothing|hang|hostile``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

MODES = ("ok", "crash", "nothing", "hang", "hostile", "flaky", "hang-once")


class FakeParser:
    """Progress lines ``{"done": i, "total": n}`` as an exact counter of items."""

    source = "benchmark.fake"

    def __init__(self) -> None:
        self.done, self.total = 0, 0

    def start(self) -> dict[str, Any]:
        return {"message": "fake: starting", "stage": "execution", "unit": "items", "current": 0}

    def feed(self, line: str) -> dict[str, Any] | None:
        try:
            record = json.loads(line)
        except ValueError:
            return None
        if not isinstance(record, dict):
            return None
        done, total = record.get("done"), record.get("total")
        if type(done) is not int or type(total) is not int or not 0 <= done <= total <= 10**9:
            return None
        self.done, self.total = done, total
        return {
            "message": f"fake: {done} of {total}",
            "stage": "execution",
            "unit": "items",
            "current": done,
            "total": total,
            "total_kind": "exact",
        }

    def finish(self, result: Any, *, success: bool) -> dict[str, Any]:
        fields: dict[str, Any] = {"stage": "execution", "unit": "items", "current": self.done}
        if self.total:
            fields.update(total=self.total, total_kind="exact")
        return fields


class FakeFramework:
    """The plugin: ``tasks`` in the schedule (or ``--arg tasks=N``) tasks, each one fake tool run."""

    name = "fake"
    requirement = None  # nothing to install: the tool is this file, run by sparkrun's interpreter
    reserved = frozenset({"result"})
    schedule_keys = frozenset({"tasks"})

    def check(self, arguments: Mapping[str, Any], bin_dir: Path) -> None:
        for mode in str(arguments.get("mode", "ok")).split(","):
            if mode not in MODES:
                from sparkrun.errors import BenchmarkError

                raise BenchmarkError(f"--arg mode is {mode!r}; the fake tool knows {', '.join(MODES)}")

    def tasks(self, arguments: Mapping[str, Any], schedule: Mapping[str, Any]) -> list[Any]:
        from sparkrun.benchmarking.framework import Task

        count = int(schedule.get("tasks") or arguments.get("tasks") or 1)
        return [Task(index, f"t={index}") for index in range(count)]

    def command(self, task: Any, context: Any) -> list[str]:
        arguments = context.arguments
        modes = str(arguments.get("mode", "ok")).split(",")
        mode = modes[task.index] if task.index < len(modes) else modes[-1]
        return [
            sys.executable,
            __file__,
            "--result",
            str(context.result_path),
            "--lines",
            str(arguments.get("lines", 10)),
            "--mode",
            mode,
            "--sleep",
            str(arguments.get("sleep", 0)),
        ]

    def environment(self, context: Any) -> dict[str, str]:
        return {}

    def parser(self, task: Any, context: Any) -> FakeParser:
        return FakeParser()

    def outcome(self, task: Any, context: Any) -> Any:
        from sparkrun.benchmarking.framework import TaskOutcome

        result = json.loads(context.result_path.read_text())
        value = result.get("value")
        if value is None:
            return TaskOutcome(measured=False, summary="the fake tool reported no value", raw=result)
        return TaskOutcome(
            measured=True, figures={"value": value, "items": result["items"]}, summary=f"value {value}", raw=result
        )


def main() -> int:
    parser = argparse.ArgumentParser(description="The fake benchmark tool.")
    parser.add_argument("--result", required=True)
    parser.add_argument("--lines", type=int, default=10)
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to take before writing anything")
    options = parser.parse_args()
    time.sleep(options.sleep)
    # flaky and hang-once misbehave on a task's first attempt only (a marker beside the attempt directories)
    marker = Path(options.result).parent.parent / f"{options.mode}.happened"
    if options.mode in ("flaky", "hang-once") and not marker.exists():
        marker.touch()
        options.mode = "crash" if options.mode == "flaky" else "hang"
    if options.mode == "hang":
        time.sleep(3600)
    if options.mode == "crash":
        print("fake: crashing as asked", file=sys.stderr)
        return 3
    write = sys.stderr.buffer.write
    hostile = b'{"done": 1e999, "total": -1}\n\x1b[2J\xed\xa0\xbd not json \x00\n' + b"x" * 70_000 + b"\n"
    for done in range(1, options.lines + 1):
        if options.mode == "hostile" and done % 3 == 0:
            write(hostile)
        write(b'{"done": %d, "total": %d}\n' % (done, options.lines))
    sys.stderr.flush()
    value = None if options.mode == "nothing" else round(options.lines / 7, 3)
    Path(options.result).write_text(json.dumps({"value": value, "items": options.lines}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
else:  # imported as a plugin module (``benchmark.plugins`` or ``daemon.plugins`` in the configuration)
    from sparkrun.benchmarking.framework import register_framework

    register_framework(FakeFramework())
