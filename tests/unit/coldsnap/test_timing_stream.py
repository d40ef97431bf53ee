"""coldsnap.timing.TimingStream: every rule of the timing stream, each refusal with its exact message."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from sparkrun.plugins.coldsnap.timing import TimingError, TimingStream
from tests.unit.coldsnap.records import (
    OPERATION_ID,
    OTHER_SHA,
    REQUEST_SHA,
    clock,
    done,
    end,
    feed_all,
    line,
    numbered,
    record,
    span,
    typical_stream,
)

BASE_KEYS = "event, format, kind, operation_id, request_sha256, sequence"


def _exactly(message: str):
    return pytest.raises(TimingError, match=f"^{re.escape(message)}$")


def rejected(records: list[Any], message: str) -> TimingStream:
    """Feed ``records`` (dicts or raw lines): all but the last are accepted, the last fails with ``message``."""
    stream = TimingStream(OPERATION_ID)
    for item in records[:-1]:
        stream.feed(item if isinstance(item, bytes) else line(item))
    with _exactly(message):
        last = records[-1]
        stream.feed(last if isinstance(last, bytes) else line(last))
    return stream


def started(*events: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """A stream begun with the controller clock, followed by ``events``."""
    return numbered(("clock", {"clock": clock()}), *events)


# A whole stream


def test_the_typical_stream_is_accepted_and_read_back():
    stream = feed_all(typical_stream())
    assert stream.complete and stream.state == "succeeded" and stream.timing_sha256 == OTHER_SHA
    assert stream.request_sha256 == REQUEST_SHA
    assert list(stream.clocks) == ["controller", "worker-0"]
    assert stream.clocks["worker-0"].unit == "unit-0" and stream.clocks["worker-0"].worker == "worker-0"
    assert [span.id for span in stream.spans] == ["worker-0-1", "adapter-1", "controller-1"]
    assert stream.spans[0].attributes == {"unit": "unit-0", "phase": "execute"}
    assert stream.spans[0].parent == "controller-1" and stream.spans[0].duration_seconds == 2.5
    assert dict(stream.open_spans) == {} and stream.records == 9 and stream.failure is None


def test_feed_returns_what_each_record_carried():
    stream = TimingStream(OPERATION_ID)
    records = typical_stream()
    results = [stream.feed(line(item)) for item in records]
    assert [result.sequence for result in results] == list(range(1, 10))
    assert [result.line for result in results] == list(range(1, 10))
    assert results[1].clock is not None and results[1].clock.id == "controller"
    assert results[2].span is not None and results[2].span.status is None and results[2].span.duration_seconds is None
    assert results[7].span is not None and results[7].span.status == "ok"
    assert (results[8].state, results[8].timing_sha256) == ("succeeded", OTHER_SHA)
    assert all(result.request_sha256 == REQUEST_SHA for result in results)


def test_a_line_without_newline_and_one_in_any_key_order_are_the_same_record():
    stream = TimingStream(OPERATION_ID)
    first = record(1, "clock", clock=clock())
    shuffled = {key: first[key] for key in reversed(list(first))}
    stream.feed(json.dumps(shuffled, indent=1).replace("\n", " ").encode())
    assert list(stream.clocks) == ["controller"]


def test_open_spans_are_listed_until_they_complete():
    stream = feed_all(started(("span_start", {"span": span()})))
    assert list(stream.open_spans) == ["controller-1"] and stream.spans == ()
    stream.feed(line(record(3, "span_complete", span=done(span()))))
    assert list(stream.open_spans) == [] and [item.id for item in stream.spans] == ["controller-1"]


def test_a_stream_needs_no_stream_start():
    assert feed_all(started(("span_complete", {"span": done(span())}), end())).complete


def test_request_sha256_is_unknown_before_the_first_record():
    assert TimingStream(OPERATION_ID).request_sha256 is None


# Lines


def test_a_record_of_65536_bytes_is_accepted():
    text = json.dumps(record(1, "stream_start"))
    TimingStream(OPERATION_ID).feed((text + " " * (65536 - len(text))).encode() + b"\n")


def test_a_record_over_64_kib_is_refused():
    text = json.dumps(record(1, "stream_start"))
    rejected(
        [(text + " " * (65537 - len(text))).encode()],
        "timing line 1: the record is 65537 bytes long; the limit is 65536 bytes",
    )


def test_a_record_that_is_not_utf8_is_refused():
    rejected([b'{"format": "\xff"}\n'], "timing line 1: the record is not UTF-8 (byte 12)")


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\n", "not JSON (Expecting value at line 1 column 1); a line must be one JSON object"),
        (
            b"{format: 1}\n",
            "not JSON (Expecting property name enclosed in double quotes at line 1 column 2); "
            "a line must be one JSON object",
        ),
        (
            b'{"format": 1} {"format": 1}\n',
            "trailing data after the JSON value at line 1 column 15; a line must be one JSON object",
        ),
        (b'{"sequence": 1, "sequence": 1}\n', "duplicate key 'sequence'; a line must be one JSON object"),
        (b'{"span": {"id": "a", "id": "a"}}\n', "duplicate key 'id'; a line must be one JSON object"),
        (b'{"sequence": NaN}\n', "NaN is not a JSON number (numbers must be finite); a line must be one JSON object"),
        (b"[1, 2]\n", "the record must be an object, not array [1, 2]"),
        (b'"stream_start"\n', "the record must be an object, not string 'stream_start'"),
    ],
)
def test_a_line_must_be_one_json_object(raw, message):
    rejected([raw], f"timing line 1: {message}")


# Base keys


def test_the_event_is_required():
    item = record(1, "stream_start")
    del item["event"]
    rejected([item], "timing line 1: the record has no 'event'; it is required")


def test_an_unknown_event_is_refused():
    rejected(
        [record(1, "span_end")],
        "timing line 1: event is 'span_end'; expected one of stream_start, clock, span_start, span_complete, "
        "stream_complete",
    )


def test_an_unknown_key_is_refused():
    rejected(
        [record(1, "stream_start", extra=1)],
        f"timing line 1: the stream_start record has an unknown key 'extra'; the keys are {BASE_KEYS}",
    )


def test_a_key_of_another_event_is_refused():
    rejected(
        [record(1, "clock", clock=clock(), state="succeeded")],
        f"timing line 1: the clock record has an unknown key 'state'; the keys are clock, {BASE_KEYS}",
    )


@pytest.mark.parametrize("key", ["format", "kind", "sequence", "operation_id", "request_sha256"])
def test_every_base_key_is_required(key):
    item = record(1, "stream_start")
    del item[key]
    rejected([item], f"timing line 1: the stream_start record has no {key!r}; it is required")


def test_an_event_key_is_required():
    rejected([record(1, "clock")], "timing line 1: the clock record has no 'clock'; it is required")


@pytest.mark.parametrize(("value", "shown"), [(2, "2"), (1.0, "1.0"), ("1", "'1'"), (True, "True"), (None, "None")])
def test_format_must_be_1(value, shown):
    rejected([record(1, "stream_start", format=value)], f"timing line 1: format is {shown}; expected 1")


def test_kind_must_be_the_timing_event_kind():
    rejected(
        [record(1, "stream_start", kind="coldsnap-timing")],
        "timing line 1: kind is 'coldsnap-timing'; expected 'coldsnap-timing-event'",
    )


def test_sequence_starts_at_1():
    rejected([record(0, "stream_start")], "timing line 1: sequence is 0; it must be an integer from 1 to 8192")


def test_sequence_has_no_gaps():
    rejected(
        [record(1, "stream_start"), record(3, "clock", clock=clock())],
        "timing line 2: sequence is 3; expected 2 (sequences count 1, 2, 3 ... without gaps)",
    )


def test_sequence_does_not_repeat():
    rejected(
        [record(1, "stream_start"), record(1, "clock", clock=clock())],
        "timing line 2: sequence is 1; expected 2 (sequences count 1, 2, 3 ... without gaps)",
    )


def test_sequence_is_at_most_8192():
    rejected([record(8193, "stream_start")], "timing line 1: sequence is 8193; it must be an integer from 1 to 8192")


@pytest.mark.parametrize(("value", "shown"), [("1", "string '1'"), (1.0, "float 1.0"), (True, "boolean True")])
def test_sequence_must_be_an_integer(value, shown):
    item = record(1, "stream_start")
    item["sequence"] = value
    rejected([item], f"timing line 1: sequence must be an integer, not {shown}")


def test_operation_id_must_be_the_request_id():
    rejected(
        [record(1, "stream_start", operation_id="other-restore")],
        "timing line 1: operation_id is 'other-restore'; expected 'example-coldsnap-restore', the request's id",
    )


@pytest.mark.parametrize("value", ["sha256:" + "A1" * 32, "sha256:" + "a" * 63, "a1" * 32, "sha1:" + "a" * 40, 7])
def test_request_sha256_must_be_a_digest(value):
    rejected(
        [record(1, "stream_start", request_sha256=value)],
        f"timing line 1: request_sha256 is {value!r}; expected 'sha256:' followed by 64 lowercase hex digits",
    )


def test_request_sha256_must_not_change():
    rejected(
        [record(1, "stream_start"), record(2, "clock", clock=clock(), request_sha256=OTHER_SHA)],
        f"timing line 2: request_sha256 is {OTHER_SHA!r}, but earlier records had {REQUEST_SHA!r}; it must not change",
    )


def test_stream_start_may_only_come_first():
    rejected(
        numbered(("clock", {"clock": clock()}), ("stream_start", {})),
        "timing line 2: stream_start is record 2; it may only be the first record",
    )


# Clocks


def test_a_clock_must_be_an_object():
    rejected(
        [record(1, "clock", clock=["controller"])], "timing line 1: clock must be an object, not array ['controller']"
    )


def test_a_clock_has_no_unknown_keys():
    rejected(
        [record(1, "clock", clock=clock(host="a"))],
        "timing line 1: clock has an unknown key 'host'; the keys are id, origin_unix_ns, source, unit, worker",
    )


@pytest.mark.parametrize("key", ["id", "source", "origin_unix_ns"])
def test_a_clock_needs_its_fields(key):
    value = clock()
    del value[key]
    rejected([record(1, "clock", clock=value)], f"timing line 1: clock has no {key!r}; it is required")


@pytest.mark.parametrize(
    ("field", "value", "shown"),
    [
        ("id", "-x", "'-x'"),
        ("id", "a b", "'a b'"),
        ("id", "c" * 129, "'" + "c" * 56 + "..."),
        ("unit", "unit 0", "'unit 0'"),
        ("worker", "", "''"),
    ],
)
def test_clock_ids_are_safe_ids(field, value, shown):
    rejected(
        [record(1, "clock", clock=clock(**{field: value}))],
        f"timing line 1: clock.{field} is {shown}; an id is 1 to 128 characters from A-Z a-z 0-9 . _ - "
        "and starts with a letter or digit",
    )


@pytest.mark.parametrize(
    ("field", "value", "shown"), [("unit", None, "null None"), ("worker", 0, "int 0"), ("id", 5, "int 5")]
)
def test_clock_ids_are_strings_and_optional_ones_are_omitted_not_null(field, value, shown):
    rejected(
        [record(1, "clock", clock=clock(**{field: value}))],
        f"timing line 1: clock.{field} must be a string, not {shown}",
    )


def test_a_clock_source_is_at_most_64_characters():
    feed_all([record(1, "clock", clock=clock(source="s" * 64))])
    rejected(
        [record(1, "clock", clock=clock(source="s" * 65))],
        "timing line 1: clock.source is 65 characters long; the limit is 64",
    )


def test_a_clock_source_is_not_empty():
    rejected(
        [record(1, "clock", clock=clock(source=""))],
        "timing line 1: clock.source is empty; it must be 1 to 64 characters",
    )


@pytest.mark.parametrize(("value", "shown"), [(0, "0"), (-5, "-5"), (2**63, str(2**63))])
def test_origin_unix_ns_is_a_positive_int64(value, shown):
    rejected(
        [record(1, "clock", clock=clock(origin_unix_ns=value))],
        f"timing line 1: clock.origin_unix_ns is {shown}; it must be an integer from 1 to 9223372036854775807",
    )


@pytest.mark.parametrize(("value", "shown"), [(1.5e18, "float 1.5e+18"), ("1", "string '1'"), (True, "boolean True")])
def test_origin_unix_ns_is_an_integer(value, shown):
    rejected(
        [record(1, "clock", clock=clock(origin_unix_ns=value))],
        f"timing line 1: clock.origin_unix_ns must be an integer, not {shown}",
    )


def test_a_clock_is_declared_once():
    rejected(
        numbered(("clock", {"clock": clock()}), ("clock", {"clock": clock(source="again")})),
        "timing line 2: clock.id is 'controller'; a clock with that id was already declared",
    )


def test_at_most_128_clocks():
    records = numbered(*[("clock", {"clock": clock(f"c{index}")}) for index in range(129)])
    rejected(records, "timing line 129: clock 'c128' would be clock number 129; the limit is 128 per operation")


# Spans


def test_a_span_must_be_an_object():
    rejected(
        started(("span_start", {"span": "controller-1"})),
        "timing line 2: span must be an object, not string 'controller-1'",
    )


def test_a_started_span_carries_no_duration_or_status():
    rejected(
        started(("span_start", {"span": done(span())})),
        "timing line 2: span has an unknown key 'duration_seconds'; "
        "the keys are attributes, clock, id, name, parent, start_offset_seconds",
    )


@pytest.mark.parametrize("key", ["id", "name", "clock", "start_offset_seconds"])
def test_a_span_needs_its_fields(key):
    value = span()
    del value[key]
    rejected(started(("span_start", {"span": value})), f"timing line 2: span has no {key!r}; it is required")


@pytest.mark.parametrize("key", ["duration_seconds", "status"])
def test_a_completed_span_needs_duration_and_status(key):
    value = done(span())
    del value[key]
    rejected(started(("span_complete", {"span": value})), f"timing line 2: span has no {key!r}; it is required")


def test_a_span_name_is_at_most_128_characters():
    feed_all(started(("span_start", {"span": span(name="n" * 128)})))
    rejected(
        started(("span_start", {"span": span(name="n" * 129)})),
        "timing line 2: span.name is 129 characters long; the limit is 128",
    )


def test_a_span_name_is_not_empty():
    rejected(
        started(("span_start", {"span": span(name="")})),
        "timing line 2: span.name is empty; it must be 1 to 128 characters",
    )


def test_a_span_id_is_a_safe_id():
    rejected(
        started(("span_start", {"span": span("controller 1")})),
        "timing line 2: span.id is 'controller 1'; an id is 1 to 128 characters from A-Z a-z 0-9 . _ - "
        "and starts with a letter or digit",
    )


def test_a_span_clock_must_be_declared_before():
    rejected(
        started(("span_start", {"span": span(clock="worker-0")})),
        "timing line 2: span.clock is 'worker-0'; no clock with that id was declared before",
    )


def test_a_span_parent_must_appear_before():
    rejected(
        started(("span_start", {"span": span("worker-1", parent="controller-1")})),
        "timing line 2: span.parent is 'controller-1'; no span with that id appeared before",
    )


def test_a_span_parent_may_have_completed_already():
    child = span("controller-2", parent="controller-1")
    feed_all(started(("span_complete", {"span": done(span())}), ("span_start", {"span": child})))


def test_a_span_is_not_its_own_parent():
    rejected(
        started(("span_start", {"span": span(parent="controller-1")})),
        "timing line 2: span.parent is 'controller-1', the span's own id; a span cannot be its own parent",
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.001, "span.start_offset_seconds is -0.001; it must be a finite number of seconds >= 0"),
        (-1, "span.start_offset_seconds is -1; it must be a finite number of seconds >= 0"),
        ("0.5", "span.start_offset_seconds must be a number, not string '0.5'"),
        (False, "span.start_offset_seconds must be a number, not boolean False"),
        (None, "span.start_offset_seconds must be a number, not null None"),
    ],
)
def test_start_offset_seconds_is_a_finite_number_at_least_0(value, message):
    rejected(started(("span_start", {"span": span(start_offset_seconds=value)})), f"timing line 2: {message}")


def test_start_offset_seconds_may_be_0_or_an_integer():
    feed_all(
        started(
            ("span_start", {"span": span(start_offset_seconds=0)}),
            ("span_start", {"span": span("c-2", start_offset_seconds=3)}),
        )
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-0.5, "span.duration_seconds is -0.5; it must be a finite number of seconds >= 0"),
        ([1], "span.duration_seconds must be a number, not array [1]"),
    ],
)
def test_duration_seconds_is_a_finite_number_at_least_0(value, message):
    rejected(started(("span_complete", {"span": done(span(), duration=value)})), f"timing line 2: {message}")


def test_status_is_ok_or_error():
    rejected(
        started(("span_complete", {"span": done(span(), status="failed")})),
        "timing line 2: span.status is 'failed'; expected one of ok, error",
    )


# Attributes


def test_up_to_32_attributes_with_empty_values_are_accepted():
    attributes = {f"k{index}": "" for index in range(32)}
    stream = feed_all(started(("span_complete", {"span": done(span(attributes=attributes))})))
    assert len(stream.spans[0].attributes) == 32


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({f"k{index}": "v" for index in range(33)}, "span.attributes has 33 entries; the limit is 32"),
        (["unit-0"], "span.attributes must be an object, not array ['unit-0']"),
        ({"": "x"}, "span.attributes key '' is empty; it must be 1 to 128 characters"),
        ({"k" * 129: "x"}, "span.attributes key '" + "k" * 56 + "... is 129 characters long; the limit is 128"),
        ({"unit": 0}, "span.attributes['unit'] must be a string, not int 0"),
        ({"unit": None}, "span.attributes['unit'] must be a string, not null None"),
        ({"note": "x" * 513}, "span.attributes['note'] is 513 characters long; the limit is 512"),
    ],
)
def test_attribute_rules(attributes, message):
    rejected(started(("span_start", {"span": span(attributes=attributes)})), f"timing line 2: {message}")


def test_an_attribute_value_may_be_512_characters():
    feed_all(started(("span_start", {"span": span(attributes={"note": "x" * 512})})))


# Start and complete


def test_a_span_starts_once():
    rejected(
        started(("span_start", {"span": span()}), ("span_start", {"span": span()})),
        "timing line 3: span 'controller-1' already started on line 2",
    )


def test_a_span_completes_once():
    rejected(
        started(("span_complete", {"span": done(span())}), ("span_complete", {"span": done(span())})),
        "timing line 3: span 'controller-1' already completed on line 2",
    )


def test_a_span_does_not_start_after_it_completed():
    rejected(
        started(("span_complete", {"span": done(span())}), ("span_start", {"span": span()})),
        "timing line 3: span 'controller-1' already completed on line 2",
    )


def test_a_complete_without_start_needs_a_known_clock_and_parent():
    rejected(
        started(("span_complete", {"span": done(span(parent="nowhere"))})),
        "timing line 2: span.parent is 'nowhere'; no span with that id appeared before",
    )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "coldsnap.other"}, "span.name is 'coldsnap.other', but its start had 'coldsnap.controller'"),
        ({"clock": "worker-0"}, "span.clock is 'worker-0', but its start had 'controller'"),
        ({"parent": "adapter-1"}, "span.parent is 'adapter-1', but its start had None"),
        ({"start_offset_seconds": 0.75}, "span.start_offset_seconds is 0.75, but its start had 0.5"),
        ({"attributes": {"phase": "execute"}}, "span.attributes['phase'] is 'execute', but its start had 'prepare'"),
        ({"attributes": {}}, "span.attributes['phase'] is absent, but its start had 'prepare'"),
        (
            {"attributes": {"phase": "prepare", "host": "a"}},
            "span.attributes['host'] is 'a', but its start had no such attribute",
        ),
        (
            {"attributes": {"phase": "prepare", "error": "boom"}},
            "span.attributes['error'] is 'boom', but its start had no such attribute "
            "(only a span completing with status error may add an error attribute)",
        ),
    ],
)
def test_a_complete_repeats_its_start(changes, message):
    start = span(attributes={"phase": "prepare"})
    records = numbered(
        ("clock", {"clock": clock()}),
        ("clock", {"clock": clock("worker-0")}),
        ("span_complete", {"span": done(span("adapter-1"))}),
        ("span_start", {"span": start}),
        ("span_complete", {"span": {**done(start), **changes}}),
    )
    rejected(records, f"timing line 5: {message} (span_start on line 4); a complete repeats its start")


def test_a_complete_may_repeat_an_integer_offset_as_a_float():
    start = span(start_offset_seconds=2)
    feed_all(
        started(("span_start", {"span": start}), ("span_complete", {"span": done(start, start_offset_seconds=2.0)}))
    )


def test_a_failed_span_may_add_an_error_attribute():
    start = span(attributes={"phase": "prepare"})
    failed = done(start, status="error", attributes={"phase": "prepare", "error": "capsule pull failed"})
    stream = feed_all(started(("span_start", {"span": start}), ("span_complete", {"span": failed})))
    assert stream.spans[0].error == "capsule pull failed" and stream.spans[0].status == "error"


def test_a_failed_span_must_keep_an_error_attribute_its_start_had():
    start = span(attributes={"error": "first"})
    failed = done(start, status="error", attributes={"error": "second"})
    rejected(
        started(("span_start", {"span": start}), ("span_complete", {"span": failed})),
        "timing line 3: span.attributes['error'] is 'second', but its start had 'first' (span_start on line 2); "
        "a complete repeats its start",
    )


def test_a_span_that_succeeded_has_no_error_even_with_an_error_attribute():
    stream = feed_all(started(("span_complete", {"span": done(span(attributes={"error": "none"}))})))
    assert stream.spans[0].error is None


def test_at_most_2048_spans():
    records = started(*[("span_complete", {"span": done(span(f"s-{index}"))}) for index in range(2049)])
    rejected(records, "timing line 2050: span 's-2048' would be span number 2049; the limit is 2048 per operation")


def test_open_spans_count_towards_the_span_limit():
    records = started(*[("span_start", {"span": span(f"s-{index}")}) for index in range(2049)])
    rejected(records, "timing line 2050: span 's-2048' would be span number 2049; the limit is 2048 per operation")


# stream_complete


def test_stream_complete_needs_a_clock():
    rejected(
        numbered(("stream_start", {}), end()),
        "timing line 2: stream_complete before any clock; a stream needs at least 1 clock",
    )


def test_stream_complete_needs_a_span():
    rejected(started(end()), "timing line 2: stream_complete before any span; a stream needs at least 1 span")


def test_stream_complete_needs_every_span_closed():
    rejected(
        started(("span_start", {"span": span()}), ("span_start", {"span": span("c-2", parent="controller-1")}), end()),
        "timing line 4: stream_complete while 2 span(s) are still open: 'controller-1', 'c-2'",
    )


def test_stream_complete_names_at_most_five_open_spans():
    records = started(*[("span_start", {"span": span(f"s-{index}")}) for index in range(7)], end())
    rejected(
        records, "timing line 9: stream_complete while 7 span(s) are still open: 's-0', 's-1', 's-2', 's-3', 's-4', ..."
    )


def test_stream_complete_state_is_succeeded_or_failed():
    rejected(
        started(("span_complete", {"span": done(span())}), end("cancelled")),
        "timing line 3: state is 'cancelled'; expected one of succeeded, failed",
    )


def test_stream_complete_timing_sha256_is_a_digest():
    rejected(
        started(("span_complete", {"span": done(span())}), end(timing_sha256="sha256:xyz")),
        "timing line 3: timing_sha256 is 'sha256:xyz'; expected 'sha256:' followed by 64 lowercase hex digits",
    )


def test_a_failed_stream_is_complete():
    stream = feed_all(started(("span_complete", {"span": done(span(), status="error")}), end("failed")))
    assert stream.complete and stream.state == "failed"


def test_nothing_follows_stream_complete():
    records = typical_stream()
    rejected(
        [*records, record(10, "stream_start")],
        "timing line 10: a record after stream_complete (line 9); the stream has ended",
    )


def test_not_even_an_empty_line_follows_stream_complete():
    rejected(
        [*typical_stream(), b"\n"], "timing line 10: a record after stream_complete (line 9); the stream has ended"
    )


# After an error


def test_after_an_error_the_stream_is_dead():
    stream = rejected(
        started(("span_start", {"span": span(clock="nowhere")})),
        "timing line 2: span.clock is 'nowhere'; no clock with that id was declared before",
    )
    with _exactly("timing line 2: span.clock is 'nowhere'; no clock with that id was declared before") as caught:
        stream.feed(line(record(2, "span_start", span=span())))
    assert caught.value.line == 2
    assert stream.failure == "timing line 2: span.clock is 'nowhere'; no clock with that id was declared before"
    assert stream.records == 1 and list(stream.open_spans) == []


def test_a_refused_complete_changes_nothing():
    start = span()
    stream = rejected(
        started(("span_start", {"span": start}), ("span_complete", {"span": done(start, name="other")})),
        "timing line 3: span.name is 'other', but its start had 'coldsnap.controller' (span_start on line 2); "
        "a complete repeats its start",
    )
    assert list(stream.open_spans) == ["controller-1"] and stream.spans == ()


def test_a_refused_first_record_does_not_set_request_sha256():
    stream = rejected(
        [record(1, "span_start", span=span())],
        "timing line 1: span.clock is 'controller'; no clock with that id was declared before",
    )
    assert stream.request_sha256 is None and stream.records == 0
