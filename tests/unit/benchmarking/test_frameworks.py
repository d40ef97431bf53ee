"""The shipped framework plugins: tasks from schedules, commands, checks, and what counts as measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkrun.benchmarking.framework import TaskContext, find_framework
from sparkrun.benchmarking.frameworks.llama_benchy import LlamaBenchy
from sparkrun.benchmarking.frameworks.tool_eval_bench import ToolEvalBench
from sparkrun.benchmarking.schedule import check_arguments, load_schedule, parse_arguments
from sparkrun.errors import BenchmarkError


def _context(tmp_path: Path, *, first: bool = True, **arguments) -> TaskContext:
    return TaskContext("http://127.0.0.1:9/v1", "tiny", tmp_path / "bin", tmp_path / "attempt", first, arguments)


def test_llama_benchy_makes_one_task_per_depth_and_concurrency():
    tasks = LlamaBenchy().tasks({"concurrency": "1 2"}, {"depth": [0, 64]})
    assert [t.label for t in tasks] == ["d=0 c=1", "d=0 c=2", "d=64 c=1", "d=64 c=2"]
    assert [t.index for t in tasks] == [0, 1, 2, 3]
    assert [t.label for t in LlamaBenchy().tasks({}, {})] == ["d=0 c=1"]


@pytest.mark.parametrize(
    ("arguments", "schedule", "message"),
    [
        ({}, {"depth": [-1]}, "depth is -1; it must be at least 0"),
        ({"concurrency": "0"}, {}, "concurrency is 0; it must be at least 1"),
        ({"depth": "zero"}, {}, "depth is 'zero'; llama-benchy takes whole numbers"),
        (
            {},
            {"depth": list(range(40)), "concurrency": list(range(1, 31))},
            "the schedule makes 1200 tasks; the limit is 1000",
        ),
    ],
)
def test_llama_benchy_refuses_bad_sweeps(arguments, schedule, message):
    with pytest.raises(BenchmarkError, match=message):
        LlamaBenchy().tasks(arguments, schedule)


def test_llama_benchy_commands_pass_arguments_as_flags_and_warm_up_once(tmp_path):
    framework = LlamaBenchy()
    task = framework.tasks({}, {"concurrency": [1, 2]})[1]
    first = framework.command(task, _context(tmp_path, pp=["64", "128"], **{"no-cache": True}))
    assert first[first.index("--pp") + 1 : first.index("--pp") + 3] == ["64", "128"]
    assert "--no-cache" in first and "--no-warmup" not in first
    assert first[first.index("--concurrency") + 1] == "2" and first[first.index("--model") + 1] == "tiny"
    assert first[first.index("--emit-progress") + 1] == "/dev/stderr"
    assert first[first.index("--save-result") + 1] == str(tmp_path / "attempt" / "result.json")
    later = framework.command(task, _context(tmp_path, first=False))
    assert later[-2:] == ["--no-warmup", "--skip-coherence"]


def test_tool_eval_bench_runs_one_task_in_its_own_directory_with_an_empty_env_file(tmp_path):
    framework = ToolEvalBench()
    (task,) = framework.tasks({}, {})
    command = framework.command(task, _context(tmp_path, short=True, trials="2"))
    assert command[1:4] == ["run", "--base-url", "http://127.0.0.1:9/v1"]
    assert "--short" in command and command[-3:] == ["--json", "--json-file", str(tmp_path / "attempt" / "result.json")]
    assert (tmp_path / "attempt" / ".env").read_text() == ""
    assert framework.parser(task, _context(tmp_path, trials="2")) is not None
    with pytest.raises(BenchmarkError, match=r"trials is 'many'; it must be a whole number of at least 1"):
        framework.check({"trials": "many"}, tmp_path / "bin")


def _result(tmp_path: Path, scenario_results: list[dict]) -> TaskContext:
    context = _context(tmp_path)
    context.directory.mkdir(parents=True, exist_ok=True)
    scores = {"final_score": 0, "total_points": 0, "max_points": 0, "scenario_results": scenario_results}
    context.result_path.write_text(json.dumps({"schema_version": "1", "final_score": 0, "scores": scores}))
    return context


def test_tool_eval_bench_measured_nothing_when_no_scenario_reached_the_server(tmp_path):
    unreached = [
        {"scenario_id": f"TC-0{i}", "status": "fail", "points": 0, "failure_kind": "connection_error"} for i in range(3)
    ]
    context = _result(tmp_path, unreached)
    outcome = ToolEvalBench().outcome(ToolEvalBench().tasks({}, {})[0], context)
    assert not outcome.measured and "connection errors only" in outcome.summary


def test_framework_lookup_suggests_the_closest_name():
    with pytest.raises(BenchmarkError, match=r"did you mean 'tool-eval-bench'\?"):
        find_framework("tool-eval-benc")


def test_arguments_and_schedules_are_checked_with_the_field_named(tmp_path):
    assert parse_arguments(["pp=64", "no-cache", "depth=0 1024"]) == {"pp": "64", "no-cache": True, "depth": "0 1024"}
    with pytest.raises(BenchmarkError, match=r"--arg sets save-result, which sparkrun sets itself for llama-benchy"):
        check_arguments(LlamaBenchy(), {"save-result": "x"}, "--arg")
    with pytest.raises(BenchmarkError, match=r"--arg argument pp holds a NUL character"):
        check_arguments(LlamaBenchy(), {"pp": "6\x004"}, "--arg")
    with pytest.raises(BenchmarkError, match=r"--arg argument pp is 5000 characters long; the limit is 4096"):
        check_arguments(LlamaBenchy(), {"pp": "1" * 5000}, "--arg")
    with pytest.raises(BenchmarkError, match=r"--arg sets no-cache to false; leave a flag out instead"):
        check_arguments(LlamaBenchy(), {"no-cache": False}, "--arg")
    schedule = tmp_path / "s.yaml"
    schedule.write_text("depth: [0]\narguments: {pp: [64, 128]}\n")
    assert load_schedule(schedule, LlamaBenchy()) == {"depth": [0], "arguments": {"pp": ["64", "128"]}}
    schedule.write_text("title: [1]\n")
    with pytest.raises(BenchmarkError, match=r"title is \[1\]; it must be text of at most 200 characters"):
        load_schedule(schedule, LlamaBenchy())
    schedule.write_text("depth: &a [*a]\n")
    with pytest.raises(BenchmarkError):
        load_schedule(schedule, LlamaBenchy())
