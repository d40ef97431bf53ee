"""Result files: headline figures, table rows, 'nothing measured', and one exact refusal per bad input."""

from __future__ import annotations

import json
import os
import re
import threading
from pathlib import Path

import pytest

from sparkrun.benchmarking.results import (
    LlamaBenchyRow,
    ResultFileError,
    read_llama_benchy_result,
    read_tool_eval_bench_result,
    summarize_llama_benchy,
    summarize_tool_eval_bench,
)
from sparkrun.benchmarking.results.llama_benchy import LLAMA_BENCHY_RESULT_LIMIT, MAX_BENCHMARK_ENTRIES
from sparkrun.core.operation import operation_scope
from sparkrun.errors import SparkrunError
from sparkrun.feedback import get_feedback
from tests.unit.benchmarking.streams import lb_entry, lb_result, teb_envelope, teb_failed_envelope

INT64 = "an integer from 0 to 9223372036854775807"


def write(tmp_path: Path, data, name: str = "result.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2) if not isinstance(data, str) else data, encoding="utf-8")
    return path


def exactly(message: str):
    return pytest.raises(ResultFileError, match=f"^{re.escape(message)}$")


def without_blocking(function, *args):
    """Run ``function``; fail (instead of hanging the suite) if it blocks."""
    outcome: list = []

    def run():
        try:
            outcome.append(function(*args))
        except BaseException as exc:  # handed back to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(10)
    assert outcome, "the reader blocked"
    return outcome[0]


# -- llama-benchy ------------------------------------------------------------------------------


def test_a_llama_benchy_result_gives_headline_figures_and_rows(tmp_path):
    result = read_llama_benchy_result(write(tmp_path, lb_result([lb_entry()])))
    assert result.measured and result.benchmarks == 1
    assert result.figures == {
        "benchmarks": 1,
        "pp_tokens_per_second": 1000.0,
        "tg_tokens_per_second": 50.0,
        "ttft_ms": 125.0,
        "peak_tokens_per_second": 60.0,
        "latency_ms": 0.9,
        "max_concurrency": 2,
        "latency_mode": "api",
        "model": "stub",
        "version": "0.4.0",
    }
    assert result.rows == (
        LlamaBenchyRow(
            pp=512,
            tg=32,
            depth=0,
            concurrency=2,
            context_phase=False,
            pp_tokens_per_second=1000.0,
            tg_tokens_per_second=50.0,
            ttft_ms=125.0,
        ),
    )


def test_headline_figures_are_means_over_entries_that_are_not_context_loads(tmp_path):
    entries = [
        lb_entry(depth=4096, context=True, scale=10.0),  # the context-loading half of a prefix-caching test
        lb_entry(depth=4096, scale=1.0),
        lb_entry(depth=4096, pp=2048, scale=2.0),
    ]
    result = read_llama_benchy_result(write(tmp_path, lb_result(entries)))
    assert (result.pp_tokens_per_second, result.tg_tokens_per_second) == (1500.0, 75.0)
    assert result.figures["peak_tokens_per_second"] == 600.0  # the highest peak of any entry
    assert [(row.pp, row.depth, row.context_phase) for row in result.rows] == [
        (512, 4096, True),
        (512, 4096, False),
        (2048, 4096, False),
    ]


@pytest.mark.parametrize(
    "entries",
    [
        [],
        [lb_entry(scale=0.0)],
        [{**lb_entry(), "pp_throughput": None, "tg_throughput": None}],
        [{key: value for key, value in lb_entry().items() if not key.endswith("throughput")}],
    ],
)
def test_a_llama_benchy_result_that_measured_nothing_says_so(tmp_path, entries):
    result = read_llama_benchy_result(write(tmp_path, lb_result(entries)))
    assert not result.measured
    assert result.figures["benchmarks"] == len(entries)


@pytest.mark.parametrize(
    ("mutate", "field", "value", "expected"),
    [
        (lambda d: d.pop("benchmarks"), "benchmarks", "None", "a JSON array (is this a --format json result?)"),
        (lambda d: d.update(benchmarks={}), "benchmarks", "{}", "a JSON array"),
        (lambda d: d["benchmarks"].append("pp512"), "benchmarks[1]", "'pp512'", "a JSON object"),
        (lambda d: d["benchmarks"][0].update(prompt_size="64"), "benchmarks[0].prompt_size", "'64'", INT64),
        (lambda d: d["benchmarks"][0].update(concurrency=True), "benchmarks[0].concurrency", "True", INT64),
        (lambda d: d["benchmarks"][0].update(context_size=-1), "benchmarks[0].context_size", "-1", INT64),
        (lambda d: d["benchmarks"][0].pop("response_size"), "benchmarks[0].response_size", "None", INT64),
        (
            lambda d: d["benchmarks"][0].update(is_context_prefill_phase="no"),
            "benchmarks[0].is_context_prefill_phase",
            "'no'",
            "true or false",
        ),
        (lambda d: d["benchmarks"][0].update(pp_throughput=5), "benchmarks[0].pp_throughput", "5", "a JSON object"),
        (
            lambda d: d["benchmarks"][0]["tg_throughput"].update(mean=float("nan")),
            "benchmarks[0].tg_throughput.mean",
            "nan",
            "a finite number from 0 to 1e+15",
        ),
        (
            lambda d: d["benchmarks"][0]["e2e_ttft"].update(mean=1e300),
            "benchmarks[0].e2e_ttft.mean",
            "1e+300",
            "a finite number from 0 to 1e+15",
        ),
        (lambda d: d.update(latency_ms=float("inf")), "latency_ms", "inf", "a finite number >= 0"),
        (lambda d: d.update(model=["stub"]), "model", "['stub']", "a string"),
    ],
)
def test_an_invalid_llama_benchy_field_is_named_with_its_value(tmp_path, mutate, field, value, expected):
    data = lb_result([lb_entry()])
    mutate(data)
    path = write(tmp_path, data)
    message = (
        f"llama-benchy result has an invalid field (path={path}, field={field}, value={value}; expected {expected})"
    )
    with exactly(message) as caught:
        read_llama_benchy_result(path)
    assert (caught.value.name, caught.value.field, caught.value.value) == (str(path), field, value)


def test_too_many_benchmark_entries_are_refused():
    data = lb_result([lb_entry()] * (MAX_BENCHMARK_ENTRIES + 1))
    with exactly(
        "llama-benchy result has an invalid field (path=result, field=benchmarks, value='<array of 10001 items>'; "
        "expected at most 10000 items)"
    ):
        summarize_llama_benchy(data)


def test_a_result_that_is_not_an_object_is_refused():
    with exactly(
        "llama-benchy result has an invalid field (path=result, field=(top level), value=[]; expected a JSON object)"
    ):
        summarize_llama_benchy([])


# -- untrusted files (both readers) -------------------------------------------------------------

READERS = {"llama-benchy": read_llama_benchy_result, "tool-eval-bench": read_tool_eval_bench_result}


@pytest.fixture(params=sorted(READERS))
def reader(request):
    return request.param, READERS[request.param]


def test_truncated_json_is_refused(tmp_path, reader):
    what, read = reader
    text = json.dumps(lb_result([lb_entry()]), indent=2)
    path = write(tmp_path, text[:200])
    with exactly(
        f"{what} result is not usable JSON (path={path}, not valid JSON: Unterminated string starting at character 189)"
    ):
        read(path)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "not valid JSON: Expecting value at character 0"),
        ('{"a": 1, "a": 2}', "the key 'a' appears twice in one object"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply to decode"),
        ('{"a": ' + "7" * 5000 + "}", "an integer has 5000 digits (limit 20)"),
        ("\ufeff{}", "not valid JSON: Expecting value at character 0"),
    ],
)
def test_json_that_cannot_be_trusted_is_refused(tmp_path, reader, text, problem):
    what, read = reader
    path = write(tmp_path, text)
    with exactly(f"{what} result is not usable JSON (path={path}, {problem})") as caught:
        read(path)
    assert caught.value.name == str(path)


def test_a_huge_file_is_refused_before_it_is_read(tmp_path, reader):
    what, read = reader
    path = tmp_path / "huge.json"
    with path.open("wb") as handle:
        handle.truncate(LLAMA_BENCHY_RESULT_LIMIT * 4)  # sparse: no disk used
    size = path.stat().st_size
    limit = LLAMA_BENCHY_RESULT_LIMIT if what == "llama-benchy" else 128 * 1024 * 1024
    with exactly(f"{what} result is too large (path={path}, {size} bytes, limit {limit} bytes)"):
        read(path)
    small = write(tmp_path, '{"benchmarks": [], "x": 1}\n', "small.json")
    with exactly(f"{what} result is too large (path={small}, 27 bytes, limit 10 bytes)"):
        read(small, limit=10)


def test_a_fifo_is_refused_without_blocking(tmp_path, reader):
    what, read = reader
    path = tmp_path / "result.json"
    os.mkfifo(path)
    error = without_blocking(read, path)
    assert isinstance(error, ResultFileError)
    assert str(error) == f"{what} result is not a regular file (path={path}, a named pipe)"


@pytest.mark.parametrize(
    ("make", "problem"),
    [
        (lambda path: path.mkdir(), "{what} result is not a regular file (path={path}, a directory)"),
        (
            lambda path: path.symlink_to("/dev/zero"),
            "{what} result is not a regular file (path={path}, a character device)",
        ),
        (lambda path: None, "cannot read {what} result (path={path}, No such file or directory)"),
        (lambda path: path.write_bytes(b'{"a": "\xff"}'), "{what} result is not UTF-8 text (path={path}, byte 7)"),
    ],
)
def test_files_that_are_not_results_are_refused(tmp_path, reader, make, problem):
    what, read = reader
    path = tmp_path / "result.json"
    make(path)
    error = without_blocking(read, str(path))
    assert isinstance(error, ResultFileError)
    assert str(error) == problem.format(what=what, path=path)


def test_result_file_errors_are_value_errors_callers_can_act_on():
    assert issubclass(ResultFileError, ValueError) and issubclass(ResultFileError, SparkrunError)


def test_an_unprintable_path_is_shown_printable(tmp_path):
    path = tmp_path / "evil\x1b[2J.json"
    with pytest.raises(ResultFileError) as caught:
        read_llama_benchy_result(path)
    assert str(caught.value).isprintable() and "evil\ufffd[2J.json" in str(caught.value)


# -- tool-eval-bench -----------------------------------------------------------------------------

THREE = [("TC-01", "pass", 2), ("TC-02", "partial", 1), ("TC-03", "fail", 0)]


def test_a_tool_eval_bench_result_gives_its_headline_figures(tmp_path):
    result = read_tool_eval_bench_result(write(tmp_path, teb_envelope(THREE, final_score=50)))
    assert result.measured
    assert (result.scenarios, result.distinct_scenarios, result.passed, result.partial, result.failed) == (
        3,
        3,
        1,
        1,
        1,
    )
    assert (result.points, result.max_points, result.score, result.trials, result.error) == (3, 6, 50, 1, None)
    assert result.figures == {
        "scenarios": 3,
        "scenarios_passed": 1,
        "scenarios_partial": 1,
        "scenarios_failed": 1,
        "points": 3,
        "max_points": 6,
        "score": 50,
        "rating": "★★★★ Good",
    }


def test_several_trials_add_their_statistics():
    result = summarize_tool_eval_bench(teb_envelope(THREE, trials=3, final_score=80))
    assert result.trials == 3
    assert (result.figures["trials"], result.figures["score_mean"]) == (3, 80.0)


def test_the_top_level_score_and_summed_points_are_used_when_scores_lack_them():
    envelope = teb_envelope(THREE, final_score=66)
    del envelope["scores"]["final_score"], envelope["scores"]["total_points"]
    result = summarize_tool_eval_bench(envelope)
    assert (result.score, result.points) == (66, 3)


def test_repeated_scenario_ids_are_counted_apart_from_results():
    result = summarize_tool_eval_bench(teb_envelope([*THREE, ("TC-01", "pass", 2)]))
    assert (result.scenarios, result.distinct_scenarios, result.passed) == (4, 3, 2)


@pytest.mark.parametrize(
    ("envelope", "error"),
    [
        (teb_failed_envelope("model \x1b[31mnot found"), "model \ufffd[31mnot found"),
        (teb_envelope([]), None),
        ({"schema_version": "1", "scores": {}}, None),
    ],
)
def test_a_tool_eval_bench_result_without_scenario_results_measured_nothing(tmp_path, envelope, error):
    result = read_tool_eval_bench_result(write(tmp_path, envelope))
    assert not result.measured and result.scenarios == 0
    assert result.error == error
    assert result.figures.get("error") == error


@pytest.mark.parametrize(
    ("mutate", "field", "value", "expected"),
    [
        (lambda d: d.update(schema_version="2"), "schema_version", "'2'", 'the string "1"'),
        (lambda d: d.update(schema_version=1), "schema_version", "1", 'the string "1"'),
        (lambda d: d.pop("schema_version"), "schema_version", "None", 'the string "1"'),
        (lambda d: d.update(scores=[]), "scores", "[]", "a JSON object"),
        (lambda d: d["scores"].update(scenario_results={}), "scores.scenario_results", "{}", "a JSON array"),
        (
            lambda d: d["scores"]["scenario_results"][2].update(status="PASS"),
            "scores.scenario_results[2].status",
            "'PASS'",
            "one of pass, partial, fail",
        ),
        (
            lambda d: d["scores"]["scenario_results"][0].update(points=-1),
            "scores.scenario_results[0].points",
            "-1",
            INT64,
        ),
        (
            lambda d: d["scores"]["scenario_results"][0].pop("scenario_id"),
            "scores.scenario_results[0].scenario_id",
            "None",
            "a non-empty string",
        ),
        (lambda d: d["scores"].update(total_points="3"), "scores.total_points", "'3'", INT64),
        (lambda d: d["scores"].update(final_score=101), "scores.final_score", "101", "a finite number from 0 to 100"),
        (lambda d: d.update(trial_statistics={"trials": "3"}), "trial_statistics.trials", "'3'", INT64),
        (lambda d: d.update(error=["x"]), "error", "['x']", "a string"),
    ],
)
def test_an_invalid_tool_eval_bench_field_is_named_with_its_value(tmp_path, mutate, field, value, expected):
    data = teb_envelope(THREE)
    mutate(data)
    path = write(tmp_path, data)
    message = (
        f"tool-eval-bench result has an invalid field (path={path}, field={field}, value={value}; expected {expected})"
    )
    with exactly(message):
        read_tool_eval_bench_result(path)


# -- figures are metrics ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [
        summarize_llama_benchy(lb_result([lb_entry(), lb_entry(depth=1024, context=True)])),
        summarize_tool_eval_bench(teb_envelope(THREE, trials=2) | {"error": "x" * 5000, "rating": "\x07" * 600}),
    ],
)
def test_figures_are_flat_envelope_valid_metrics(context, result):
    assert len(result.figures) <= 24
    assert all(type(value) in (int, float, str) for value in result.figures.values())
    with operation_scope(context):
        event = get_feedback("benchmark.test").report("figures", log_message=False, metrics=result.figures)
    assert event["metrics"] == result.figures
    assert all(not isinstance(value, str) or value.isprintable() for value in result.figures.values())
