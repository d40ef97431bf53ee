"""Every kind of bad line is ignored or warned about, never raises, and never leaks unshowable text.

Each answer is reported through a real reporter (see conftest), so the
envelope validator checks it, and every delivered text is checked printable.
"""

from __future__ import annotations

import json

import pytest

from sparkrun.benchmarking.parsers import LlamaBenchyParser, ToolEvalBenchParser
from tests.unit.benchmarking.conftest import delivering
from tests.unit.benchmarking.streams import lb, lb_end, lb_start, lb_tokens, teb_result, teb_start

PARSERS = {"tool-eval-bench": ToolEvalBenchParser, "llama-benchy": LlamaBenchyParser}
#: One valid event line per parser, and the key that names the event type.
VALID = {
    "tool-eval-bench": ('{"event": "scenario_start", "scenario_id": "TC-01", "title": "', '", "total": 3}'),
    "llama-benchy": ('{"schema":"llama-benchy-progress.v1","type":"header","ts":1.0,"llama_benchy_version":"', '"}'),
}


def padded(name: str, length: int) -> str:
    head, tail = VALID[name]
    return head + "a" * (length - len(head) - len(tail)) + tail


@pytest.fixture(params=sorted(PARSERS))
def name(request):
    return request.param


def only_warning(context, name, line):
    """The one answer to ``line``: a warning, delivered."""
    with delivering(context, PARSERS[name]()) as run:
        event = run.feed(line)
    assert event is not None and event["level"] == "warning", event
    assert event["metrics"]["ignored_lines"] == 1
    return event


def test_an_oversized_line_is_ignored_with_a_warning(context, name):
    event = only_warning(context, name, padded(name, 65_537))
    assert event["message"] == f"Ignored a line from {name}: line 1 is 65537 characters long (limit 65536)"


def test_a_line_of_exactly_the_limit_is_read(context, name):
    line = padded(name, 65_536)
    assert len(line) == 65_536
    with delivering(context, PARSERS[name]()) as run:
        event = run.feed(line + "\n")  # the line ending does not count
    assert event is not None and event["level"] == "info" and len(event["message"]) < 300


def test_a_ten_megabyte_line_is_ignored(context, name):
    event = only_warning(context, name, "{" + "x" * 10_000_000)
    assert "line 1 is 10000001 characters long" in event["message"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"event": "scenario_result", ', "line 1: not valid JSON: Expecting property name enclosed in double quotes"),
        ("{'event': 'x'}", "line 1: not valid JSON: Expecting property name"),
        ('{"a": 1} trailing', "line 1: not valid JSON: Extra data at character 9"),
        ('{"event": "a\x01b"}', "line 1: not valid JSON: Invalid control character at character 12"),
        ("[1, 2, 3]", "line 1 is a JSON array, not an object"),
        ('{"scenario_id": "x"}', "line 1 has no text "),
        ('{"event": 5, "type": 5}', "line 1 has no text "),
        ('{"event": "x", "event": "y", "type": "x"}', "line 1: the key 'event' appears twice in one object"),
        ("[" * 30_000 + "]" * 30_000, "line 1: nested too deeply to decode"),
        ('{"a": ' + "[" * 30_000 + "]" * 30_000 + "}", "line 1: nested too deeply to decode"),
        ('{"event": "scenario_result", "points": ' + "9" * 25 + "}", "line 1: an integer has 25 digits (limit 20)"),
        ('{"x": ' + "1" * 5000 + "}", "line 1: an integer has 5000 digits (limit 20)"),
    ],
)
def test_lines_that_are_not_events_are_warned_about(context, name, line, problem):
    event = only_warning(context, name, line)
    assert event["message"].startswith(f"Ignored a line from {name}: {problem}")


def test_duplicate_keys_are_refused_not_resolved(context):
    line = '{"event": "scenario_result", "scenario_id": "TC-01", "status": "pass", "status": "fail", "points": 2}'
    with delivering(context, ToolEvalBenchParser()) as run:
        event = run.feed(line)
    assert event["message"] == (
        "Ignored a line from tool-eval-bench: line 1: the key 'status' appears twice in one object"
    )
    assert event["current"] == 0 and event["metrics"]["scenarios_passed"] == 0


@pytest.mark.parametrize("line", ["", "   ", "42", "null", '"a string"', "true", "\x1b[2J\x1b]0;title\x07", "\ud800"])
def test_ordinary_text_is_skipped_silently(name, line):
    assert PARSERS[name]().feed(line) is None


@pytest.mark.parametrize("line", [None, b'{"event": "x"}', 42, ["{}"]])
def test_a_line_that_is_not_text_is_warned_about(context, name, line):
    event = only_warning(context, name, line)
    assert event["message"] == f"Ignored a line from {name}: line 1 is a {type(line).__name__}, not text"


def test_a_str_subclass_runs_none_of_its_methods(context, name):
    class Hostile(str):
        def rstrip(self, *args):
            raise RuntimeError("called")

        def lstrip(self, *args):
            raise RuntimeError("called")

    with delivering(context, PARSERS[name]()) as run:
        assert run.feed(Hostile(padded(name, 100))) is not None


# -- wrongly typed fields ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("points", "2"),
        ("points", True),
        ("points", -1),
        ("points", 2.0),
        ("points", None),
        ("points", 10**19),
        ("points", 1e400),
        ("status", "PASS"),
        ("status", 1),
        ("status", ["pass"]),
        ("scenario_id", ""),
        ("scenario_id", 5),
        ("scenario_id", "x" * 129),
        ("total", "3"),
        ("total", -1),
        ("total", True),
        ("total", 1.5),
        ("total", 10**19),
    ],
)
def test_a_wrongly_typed_scenario_result_changes_nothing(context, field, value):
    event = {"event": "scenario_result", "scenario_id": "TC-01", "status": "pass", "points": 2, "total": 3}
    event[field] = value
    with delivering(context, ToolEvalBenchParser()) as run:
        answer = run.feed(json.dumps(event))
        after = run.feed(teb_result("TC-02", "pass", 2, 0, 3))
    assert answer["level"] == "warning"
    assert f"scenario_result has an invalid {field} " in answer["message"]
    assert answer["current"] == 0 and answer["metrics"]["scenario_results"] == 0
    assert (after["current"], after["total"], after["metrics"]["points"]) == (1, 3, 2)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        (lb("request_end", 1.0, request_id=0, total_tokens="3", prompt_tokens=1, decode_seconds=0.1), "total_tokens"),
        (lb("request_end", 1.0, request_id=0, total_tokens=3, prompt_tokens=True, decode_seconds=0.1), "prompt_tokens"),
        (lb("request_end", 1.0, request_id=0, total_tokens=3, prompt_tokens=1, decode_seconds=-1), "decode_seconds"),
        ('{"type":"request_end","total_tokens":3,"prompt_tokens":1,"decode_seconds":NaN}', "decode_seconds"),
        ('{"type":"request_first_token","ttft_s":Infinity}', "ttft_s"),
        ('{"type":"latency_measured","latency_s":-Infinity}', "latency_s"),
        (lb("tokens", 1.0, request_id=0, count=10**7, snippet=""), "count"),
        (lb("request_start", 1.0, prompt_size=512, response_size=32, context_size=0, concurrency="2"), "concurrency"),
    ],
)
def test_a_wrongly_typed_llama_benchy_event_changes_nothing(context, line, field):
    with delivering(context, LlamaBenchyParser()) as run:
        answer = run.feed(line)
    assert answer["level"] == "warning" and f"has an invalid {field} " in answer["message"]
    metrics = answer["metrics"]
    assert (metrics["requests_started"], metrics["requests_finished"], metrics["streamed_tokens"]) == (0, 0, 0)
    assert "mean_ttft_ms" not in metrics and "latency_ms" not in metrics


def test_optional_fields_of_the_wrong_type_are_dropped(context):
    line = '{"event": "scenario_result", "scenario_id": "TC-01", "status": "pass", "points": 2, '
    line += '"duration_seconds": NaN}'
    complete = '{"event": "benchmark_complete", "json_file": 5, "final_score": Infinity}'
    start = json.dumps({"event": "scenario_start", "scenario_id": "TC-02", "title": ["x"], "category": None})
    with delivering(context, ToolEvalBenchParser()) as run:
        result, done, started = run.feed_all([line, complete, start])
    assert result["level"] == "progress" and "last_duration_seconds" not in result["metrics"]
    assert done["message"] == "tool-eval-bench completed its scenarios (1 scenarios)"
    assert "advisory_final_score" not in done["metrics"]
    assert started["message"] == "Scenario TC-02 started"


def test_absurd_timestamps_are_ignored(context):
    lines = [lb_start(0, 1e308), lb_tokens(0, -5.0), lb_end(0, float("nan"))]
    with delivering(context, LlamaBenchyParser()) as run:
        answers = run.feed_all(lines)
    assert answers[-1]["metrics"]["requests_finished"] == 1
    assert "output_tokens_per_second" not in answers[-1]["metrics"]


# -- text that must not reach a terminal ----------------------------------------------------

HOSTILE_TEXT = "\x1b[2J\x1b]0;pwned\x07\u202egnp.exe\r\n\x00\ud800\udfff"
#: HOSTILE_TEXT as shown: every control, escape and format character is U+FFFD (JSON joins the surrogate pair
#: into U+103FF, an unassigned and so unprintable code point).
SHOWN = "\ufffd[2J\ufffd]0;pwned\ufffd\ufffdgnp.exe\ufffd\ufffd\ufffd\ufffd"


def test_escape_sequences_and_format_characters_in_tool_text_are_made_printable(context):
    lines = [
        teb_start(HOSTILE_TEXT[:20], 0, 3, title=HOSTILE_TEXT, category=HOSTILE_TEXT),
        teb_result(HOSTILE_TEXT[:20], "pass", 2, 0, 3),
        json.dumps({"event": "error", "error": HOSTILE_TEXT, "message": HOSTILE_TEXT * 1000}),
    ]
    with delivering(context, ToolEvalBenchParser()) as run:
        started, result, error = run.feed_all(lines)
    shown_id = SHOWN[:20]
    assert started["message"] == f"Scenario {shown_id} ({SHOWN}) started: {SHOWN}"
    assert result["message"] == f"{shown_id}: pass, 2 points (1 of 3 scenarios)"
    assert result["metrics"]["last_scenario_id"] == shown_id
    assert error["message"].startswith(f"tool-eval-bench reported an error ({SHOWN}): {SHOWN}{SHOWN}")
    assert len(error["message"]) < 1200 and error["message"].endswith("...")


@pytest.mark.parametrize(
    "line",
    [
        '{"event": "scenario_start", "scenario_id": "a\\ud800b", "title": "t\\udfffu", "total": 3}',  # JSON escapes
        '{"event": "scenario_start", "scenario_id": "a\ud800b", "title": "t\udfffu", "total": 3}',  # raw, as
        # surrogateescape decoding of a non-UTF-8 byte leaves them in a line
    ],
)
def test_lone_surrogates_are_replaced(context, line):
    with delivering(context, ToolEvalBenchParser()) as run:
        event = run.feed(line)
    assert event["message"] == "Scenario a\ufffdb started: t\ufffdu"


def test_model_output_snippets_never_leave_the_llama_benchy_parser(context):
    secret = "the model said: " + HOSTILE_TEXT
    lines = [lb_start(0, 1.0, concurrency=1)] + [lb_tokens(0, 1.0 + n, snippet=secret) for n in range(1, 5)]
    lines.append(lb_end(0, 9.0, error=HOSTILE_TEXT))
    with delivering(context, LlamaBenchyParser(report_interval=0)) as run:
        answers = [answer for answer in run.feed_all(lines) if answer]
    assert len(answers) == 6
    for event in answers:
        assert "model said" not in json.dumps(event)
    assert answers[-1]["message"] == f"A llama-benchy request failed: {SHOWN}"


# -- floods -------------------------------------------------------------------------------


def test_a_flood_of_bad_lines_yields_a_bounded_number_of_warnings(context, name):
    with delivering(context, PARSERS[name]()) as run:
        answers = run.feed_all("{not json" for _ in range(100_000))
        last = run.finish(None, success=False)
    warnings = [answer for answer in answers if answer]
    assert len(warnings) == 10  # lines 1-5, 10, 100, 1000, 10000, 100000
    assert [warning["metrics"]["ignored_lines"] for warning in warnings] == [1, 2, 3, 4, 5, 10, 100, 1000, 10**4, 10**5]
    assert last["metrics"]["ignored_lines"] == 100_000


def test_a_flood_of_tool_errors_yields_a_bounded_number_of_warnings(context):
    line = json.dumps({"event": "log", "level": "error", "logger": "x", "message": "disk full"})
    with delivering(context, ToolEvalBenchParser()) as run:
        answers = run.feed_all(line for _ in range(1000))
    assert sum(1 for answer in answers if answer) == 8  # 1-5, 10, 100, 1000


def test_good_lines_after_bad_ones_still_count(context, name):
    good = [teb_result("TC-01", "pass", 2, 0, 1)] if name == "tool-eval-bench" else [lb_start(0, 1.0), lb_end(0, 2.0)]
    with delivering(context, PARSERS[name]()) as run:
        run.feed_all(["{bad", "[1]", None, "{" * 70_000])
        answers = run.feed_all(good)
    assert answers[-1]["current"] == 1 and answers[-1]["metrics"]["ignored_lines"] == 4


def test_tiny_durations_never_make_a_rate_infinite(context):
    # Found by the property tests: 1 token over a denormal decode time overflowed to inf.
    lines = [
        lb_start(0, 0.0, concurrency=1),
        lb_tokens(0, 5e-324, count=1000),
        lb("request_end", 5e-324, request_id=0, total_tokens=1, prompt_tokens=0, decode_seconds=2.2250738585e-313),
    ]
    with delivering(context, LlamaBenchyParser(report_interval=0)) as run:
        answers = run.feed_all(lines)
    assert "decode_tokens_per_second" not in answers[-1]["metrics"]
    assert "output_tokens_per_second" not in answers[-1]["metrics"]
    assert answers[-1]["current"] == 1
