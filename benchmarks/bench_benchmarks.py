"""The benchmark runner's own cost, each figure against a baseline measured in the same run.

A fake framework (examples/benchmarks/fake_framework.py) writes 100,000
progress lines on stderr. Three targets:

(1) Parse-and-report per line: the runner's line handling (decode, redact,
    the framework's parser, the throttle, the reports it lets through, to
    one subscriber) over the same 100,000 lines held in memory, minus the
    bare loop that only decodes them. Target: at most 20 us per line. The
    same for the real tool-eval-bench parser over 50,000 scenarios (a start
    and a result line each), the realistic case: strict JSON and counters.
(2) Scheduler overhead per task: 10 tasks of the fake tool writing nothing,
    through ``api.benchmark`` against a running example workload, against
    the same 10 commands run directly one after another. Target: at most
    50 ms per task beyond the tool's own runtime.
(3) Throttling: the 100,000-line task, for real through the runner: fewer
    than 2,000 feedback envelopes for that task, and its final count exact.

Best of three rounds for (1) and (2). Exits 1 if a target is missed.
Usage: ``python benchmarks/bench_benchmarks.py``.
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _table import Target, verdict

from sparkrun import api
from sparkrun.application import initialize
from sparkrun.benchmarking.attempts import Throttle
from sparkrun.core.operation import operation_scope
from sparkrun.core.redaction import Redactor
from sparkrun.feedback import get_feedback

ROOT = Path(__file__).resolve().parents[1]
LINES = 100_000
TASKS = 10
ROUNDS = 3


def _fake() -> Any:
    spec = importlib.util.spec_from_file_location(
        "fake_framework", ROOT / "examples" / "benchmarks" / "fake_framework.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # registers the fake framework
    return module


def _lines() -> list[bytes]:
    return [b'{"done": %d, "total": %d}' % (done, LINES) for done in range(1, LINES + 1)]


def _scenario_lines() -> list[bytes]:
    """tool-eval-bench's stderr for 100,000 scenarios: a start and a result each, as the tool writes them."""
    lines = []
    for index in range(LINES // 2):
        sid = f"TC-{index:06d}"
        lines.append(
            b'{"event": "scenario_start", "scenario_id": "%s", "title": "Scenario %d", "category": "A", '
            b'"index": %d, "total": %d}' % (sid.encode(), index, index, LINES // 2)
        )
        lines.append(
            b'{"event": "scenario_result", "scenario_id": "%s", "status": "%s", "points": %d, "index": %d, '
            b'"total": %d, "duration_seconds": 0.07}'
            % (sid.encode(), (b"pass", b"partial", b"fail")[index % 3], 2 - index % 3, index, LINES // 2)
        )
    return lines


def parse_and_report(make_parser: Any, lines: list[bytes]) -> tuple[float, float]:
    """Seconds per line: the runner's handling, and the bare decode loop."""
    sink: list[Any] = []
    sctx = initialize(state_dir=tempfile.mkdtemp(), events=sink.append)
    redact = Redactor()
    redact.add("a-secret-token")
    best_runner = best_bare = float("inf")
    for _ in range(ROUNDS):
        started = time.perf_counter()
        for raw in lines:
            raw.decode("utf-8", errors="replace")
        best_bare = min(best_bare, time.perf_counter() - started)
        with operation_scope(sctx, name="bench"):
            reporter = get_feedback("benchmark.fake")
            parser = make_parser()
            throttle = Throttle(lambda fields, reporter=reporter: reporter.report(**fields), interval=0.5)
            started = time.perf_counter()
            for raw in lines:
                fields = parser.feed(redact.text(raw.decode("utf-8", errors="replace")))
                if fields is not None:
                    throttle.offer(fields, time.monotonic())
            throttle.flush(time.monotonic())
            best_runner = min(best_runner, time.perf_counter() - started)
    return best_runner / len(lines), best_bare / len(lines)


def scheduler_overhead(fake: Any, deployment: str, sctx: Any) -> tuple[float, float]:
    """Seconds per task through the runner, and per direct run of the same command."""
    import subprocess

    with tempfile.TemporaryDirectory() as scratch:
        argv = [sys.executable, fake.__file__, "--result", f"{scratch}/r.json", "--lines", "0"]
        best_direct = best_runner = float("inf")
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(TASKS):
                subprocess.run(argv, check=True, capture_output=True)
            best_direct = min(best_direct, time.perf_counter() - started)
            request = api.BenchmarkRequest(deployment, "fake", arguments={"tasks": str(TASKS), "lines": "0"})
            started = time.perf_counter()
            result = api.benchmark(request, sctx=sctx)
            best_runner = min(best_runner, time.perf_counter() - started)
            assert result.completed == TASKS, result
    return best_runner / TASKS, best_direct / TASKS


def throttled(deployment: str, sctx: Any, events: list[dict[str, Any]]) -> tuple[int, Any]:
    """Envelopes of the 100,000-line task, and its final count."""
    events.clear()
    request = api.BenchmarkRequest(deployment, "fake", arguments={"lines": str(LINES)})
    api.benchmark(request, sctx=sctx)
    attempt = [e for e in events if e.get("source") == "benchmark.fake"]
    return len(attempt), attempt[-1].get("current")


def main() -> int:
    from sparkrun.benchmarking.parsers import ToolEvalBenchParser

    fake = _fake()
    runner, bare = parse_and_report(fake.FakeParser, _lines())
    scenarios, scenarios_bare = parse_and_report(ToolEvalBenchParser, _scenario_lines())
    events: list[dict[str, Any]] = []
    sctx = initialize(state_dir=tempfile.mkdtemp(), events=events.append)
    launched = api.run(api.RunOptions(recipe=str(ROOT / "examples" / "recipes" / "example-chat.yaml")), sctx=sctx)
    try:
        per_task, direct = scheduler_overhead(fake, launched.name, sctx)
        count, final = throttled(launched.name, sctx, events)
    finally:
        api.stop(launched.name, sctx=sctx)
    per_line = runner - bare
    overhead = per_task - direct
    print(f"{'case':<52} {'value':>12}")
    print(f"{'bare decode loop, per line':<52} {bare * 1e6:>9.2f} us")
    print(f"{'runner: decode+redact+parse+throttle+report, per line':<52} {runner * 1e6:>9.2f} us")
    print(f"{'same, tool-eval-bench parser on scenario lines':<52} {scenarios * 1e6:>9.2f} us")
    print(f"{'fake tool run directly, per task':<52} {direct * 1e3:>9.1f} ms")
    print(f"{'fake tool through the runner, per task':<52} {per_task * 1e3:>9.1f} ms")
    print(f"{'envelopes for the 100,000-line task':<52} {count:>12,}")
    return verdict(
        [
            Target(
                "parse-and-report <= 20 us/line",
                f"{per_line * 1e6:.2f} us ({runner / bare:.1f}x the bare loop)",
                per_line <= 20e-6,
            ),
            Target(
                "tool-eval-bench parse-and-report <= 20 us/line",
                f"{(scenarios - scenarios_bare) * 1e6:.2f} us",
                scenarios - scenarios_bare <= 20e-6,
            ),
            Target(
                "scheduler overhead <= 50 ms/task",
                f"{overhead * 1e3:.1f} ms ({per_task / direct:.2f}x direct)",
                overhead <= 0.050,
            ),
            Target("journal < 2,000 events for 100,000 lines", f"{count:,}", count < 2000),
            Target("final count exact", f"{final:,} of {LINES:,}", final == LINES),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
