"""Property tests of TimingStream: generated valid streams validate; single mutations are caught where they are."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sparkrun.plugins.coldsnap.canonical import canonical_json, is_digest
from sparkrun.plugins.coldsnap.timing import Clock, Span, TimingError, TimingRecord, TimingStream
from tests.unit.coldsnap.records import OPERATION_ID, OTHER_SHA, REQUEST_SHA, record

_text = st.text(max_size=20)
_offsets = st.integers(0, 10**6) | st.floats(0, 1e9, allow_nan=False, allow_infinity=False)
_digests = st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda hexits: "sha256:" + hexits)
_json_leaves = (
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False)
)
_json_values = st.recursive(
    _json_leaves | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _clock(draw: st.DrawFn, index: int) -> dict[str, Any]:
    value = {
        "id": f"clock-{index}",
        "source": draw(st.text(min_size=1, max_size=64)),
        "origin_unix_ns": draw(st.integers(1, 2**63 - 1)),
    }
    if draw(st.booleans()):
        value["unit"] = f"unit-{index}"
    if draw(st.booleans()):
        value["worker"] = f"worker-{index}"
    return value


@st.composite
def _span(draw: st.DrawFn, index: int, clock_count: int) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A span's start object (None when it completes without one) and its complete object."""
    start: dict[str, Any] = {
        "id": f"clock-{index}-{index}",
        "name": draw(st.text(min_size=1, max_size=128)),
        "clock": f"clock-{draw(st.integers(0, clock_count - 1))}",
        "start_offset_seconds": draw(_offsets),
    }
    if index and draw(st.booleans()):
        start["parent"] = f"clock-{(parent := draw(st.integers(0, index - 1)))}-{parent}"
    if draw(st.booleans()):
        start["attributes"] = draw(
            st.dictionaries(st.text(min_size=1, max_size=128).filter(lambda key: key != "error"), _text, max_size=4)
        )
    status = draw(st.sampled_from(["ok", "error"]))
    complete = {**copy.deepcopy(start), "duration_seconds": draw(_offsets), "status": status}
    if status == "error" and draw(st.booleans()):
        complete["attributes"] = {**start.get("attributes", {}), "error": draw(_text)}
    return complete, (start if draw(st.booleans()) else None)


@st.composite
def valid_streams(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A valid stream in a random valid order: clocks before their spans, parents before children."""
    clocks = [draw(_clock(index)) for index in range(draw(st.integers(1, 4)))]
    spans = [draw(_span(index, len(clocks))) for index in range(draw(st.integers(1, 8)))]
    events: list[tuple[str, dict[str, Any]]] = [("stream_start", {})] if draw(st.booleans()) else []
    declared, appeared, open_ids = 0, 0, []
    while declared < len(clocks) or appeared < len(spans) or open_ids:
        choices = []
        if declared < len(clocks):
            choices.append("clock")
        if appeared < len(spans) and int(spans[appeared][0]["clock"].split("-")[1]) < declared:
            choices.append("span")
        if open_ids:
            choices.append("complete")
        choice = draw(st.sampled_from(choices))
        if choice == "clock":
            events.append(("clock", {"clock": clocks[declared]}))
            declared += 1
        elif choice == "span":
            complete, start = spans[appeared]
            if start is None:
                events.append(("span_complete", {"span": complete}))
            else:
                events.append(("span_start", {"span": start}))
                open_ids.append(appeared)
            appeared += 1
        else:
            index = open_ids.pop(draw(st.integers(0, len(open_ids) - 1)))
            events.append(("span_complete", {"span": spans[index][0]}))
    events.append(
        ("stream_complete", {"state": draw(st.sampled_from(["succeeded", "failed"])), "timing_sha256": draw(_digests)})
    )
    return [record(index, event, **fields) for index, (event, fields) in enumerate(events, start=1)]


def _spelled(draw: st.DrawFn, value: dict[str, Any]) -> bytes:
    """``value`` as one NDJSON line in one of several spellings JSON allows."""
    if draw(st.booleans()):
        value = {key: value[key] for key in reversed(list(value))}
    separators = draw(st.sampled_from([(", ", ": "), (",", ":"), (" , ", " : ")]))
    return json.dumps(value, separators=separators, ensure_ascii=draw(st.booleans())).encode("utf-8") + b"\n"


def _matches(result: TimingRecord, value: dict[str, Any]) -> bool:
    """Whether ``result`` holds what the record ``value`` said."""
    if value["event"] == "clock":
        clock = value["clock"]
        return result.clock == Clock(
            clock["id"], clock["source"], clock["origin_unix_ns"], clock.get("unit"), clock.get("worker")
        )
    if value["event"] in ("span_start", "span_complete"):
        span: Span | None = result.span
        given_span = value["span"]
        return span is not None and (
            (span.id, span.name, span.clock, span.start_offset_seconds, span.parent, dict(span.attributes))
            == (
                given_span["id"],
                given_span["name"],
                given_span["clock"],
                given_span["start_offset_seconds"],
                given_span.get("parent"),
                given_span.get("attributes", {}),
            )
            and (span.duration_seconds, span.status) == (given_span.get("duration_seconds"), given_span.get("status"))
        )
    if value["event"] == "stream_complete":
        return (result.state, result.timing_sha256) == (value["state"], value["timing_sha256"])
    return True


def _consistent(stream: TimingStream) -> None:
    ids = {span.id for span in stream.spans}
    assert stream.complete and not stream.open_spans and stream.clocks and stream.spans
    assert all(span.clock in stream.clocks for span in stream.spans)
    assert all(span.parent is None or span.parent in ids for span in stream.spans)
    assert len(ids) == len(stream.spans)


@given(valid_streams(), st.data())
def test_generated_valid_streams_validate_in_any_spelling(records, data):
    stream = TimingStream(OPERATION_ID)
    for value in records:
        assert _matches(stream.feed(_spelled(data.draw, value)), value)
    _consistent(stream)
    completes = [value["span"] for value in records if value["event"] == "span_complete"]
    assert [span.id for span in stream.spans] == [value["id"] for value in completes]
    assert list(stream.clocks) == [value["clock"]["id"] for value in records if value["event"] == "clock"]
    assert stream.state == records[-1]["state"] and stream.request_sha256 == REQUEST_SHA


def _start_of(records: list[dict[str, Any]], span_id: str) -> dict[str, Any] | None:
    return next(
        (item["span"] for item in records if item["event"] == "span_start" and item["span"]["id"] == span_id), None
    )


def _repeats_starts(stream: TimingStream, records: list[dict[str, Any]]) -> None:
    """Every completed span that had a start says what its start said (an error attribute aside)."""
    for span in stream.spans:
        start = _start_of(records, span.id)
        if start is None:
            continue
        attributes = dict(span.attributes)
        if span.status == "error" and "error" not in start.get("attributes", {}):
            attributes.pop("error", None)
        assert (span.name, span.clock, span.parent, span.start_offset_seconds, attributes) == (
            start["name"],
            start["clock"],
            start.get("parent"),
            start["start_offset_seconds"],
            start.get("attributes", {}),
        )


def _first_failure(lines: list[bytes]) -> tuple[TimingStream, int | None]:
    stream = TimingStream(OPERATION_ID)
    for number, raw in enumerate(lines, start=1):
        try:
            stream.feed(raw)
        except TimingError as error:
            assert error.line == number and str(error).startswith(f"timing line {number}: ")
            return stream, number
    return stream, None


def _lines(records: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(value).encode() + b"\n" for value in records]


_BREAKERS = [
    "unknown_key",
    "drop_base_key",
    "format",
    "kind",
    "sequence",
    "operation_id",
    "request_sha256",
    "drop_record",
    "repeat_record",
    "truncate",
    "trailing_data",
    "duplicate_key",
    "clock_field",
    "span_field",
    "complete_differs",
    "end_state",
    "start_extra_key",
]


def _targets(records: list[dict[str, Any]], how: str) -> list[int]:
    """The records ``how`` can break."""
    events = {
        "clock_field": ("clock",),
        "span_field": ("span_start", "span_complete"),
        "complete_differs": ("span_complete",),
        "end_state": ("stream_complete",),
        "start_extra_key": ("stream_start",),
    }.get(how)
    return [
        index
        for index, value in enumerate(records)
        if events is None
        or (
            value["event"] in events
            and (how != "complete_differs" or _start_of(records[:index], value["span"]["id"]) is not None)
        )
    ]


def _break(records: list[dict[str, Any]], index: int, how: str, data: st.DataObject) -> tuple[list[bytes], int]:
    """``records`` with record ``index`` broken in a way that is always wrong, and the line that must fail."""
    value = records[index]
    lines = _lines(records)
    fails_at = index + 1
    if how == "unknown_key":
        value["zz_extra"] = data.draw(_json_values)
    elif how == "drop_base_key":
        del value[data.draw(st.sampled_from(["format", "kind", "sequence", "event", "operation_id", "request_sha256"]))]
    elif how == "format":
        value["format"] = data.draw(_json_values.filter(lambda other: canonical_json(other) != b"1"))
    elif how == "kind":
        value["kind"] = data.draw(_json_values.filter(lambda other: other != "coldsnap-timing-event"))
    elif how == "sequence":
        value["sequence"] += data.draw(st.integers(-3, 3).filter(bool))
    elif how == "operation_id":
        value["operation_id"] = data.draw(_text.filter(lambda other: other != OPERATION_ID))
    elif how == "request_sha256":
        value["request_sha256"] = data.draw(_digests.filter(lambda other: other != REQUEST_SHA) | _json_values)
        if index == 0 and is_digest(value["request_sha256"]):
            fails_at = 2  # the first record sets the digest; the second disagrees with it
    elif how == "drop_record":
        return lines[:index] + lines[index + 1 :], fails_at if index + 1 < len(lines) else 0
    elif how == "repeat_record":
        return lines[: index + 1] + lines[index:], index + 2
    elif how == "truncate":
        lines[index] = lines[index][: data.draw(st.integers(0, len(lines[index]) - 3))] + b"\n"
        return lines, fails_at
    elif how == "trailing_data":
        lines[index] = lines[index][:-1] + data.draw(st.sampled_from([b" {}", b"x", b" 1", b'"a"'])) + b"\n"
        return lines, fails_at
    elif how == "duplicate_key":
        key = data.draw(st.sampled_from(sorted(value)))
        lines[index] = (
            b"{" + json.dumps(key).encode() + b": " + json.dumps(value[key]).encode() + b", " + lines[index][1:]
        )
        return lines, fails_at
    elif how == "clock_field":
        field, bad = data.draw(
            st.sampled_from(
                [("origin_unix_ns", 0), ("origin_unix_ns", 1.5), ("source", ""), ("id", "a b"), ("unit", None)]
            )
        )
        value["clock"][field] = bad
    elif how == "span_field":
        field, bad = data.draw(
            st.sampled_from([("clock", "no-such-clock"), ("start_offset_seconds", -1), ("id", "-x"), ("name", "")])
        )
        value["span"][field] = bad
    elif how == "complete_differs":
        attributes = {**value["span"].get("attributes", {}), "added-later": "x"}
        field, bad = data.draw(
            st.sampled_from(
                [("name", value["span"]["name"] + "!"), ("attributes", attributes), ("parent", "clock-0-0")]
            )
        )
        if field == "parent" and value["span"].get("parent") == "clock-0-0":
            bad = None  # the span had that parent: removing it is the change
            del value["span"]["parent"]
        if bad is not None:
            value["span"][field] = bad
    elif how == "end_state":
        value["state"] = data.draw(_json_values.filter(lambda other: other not in ("succeeded", "failed")))
    else:  # start_extra_key: stream_start with another event's key
        value["clock"] = {"id": "c", "source": "s", "origin_unix_ns": 1}
    return _lines(records), fails_at


@pytest.mark.parametrize("how", _BREAKERS)
@settings(max_examples=60)
@given(records=valid_streams(), data=st.data())
def test_a_broken_record_is_refused_on_its_own_line(how, records, data):
    targets = _targets(records, how)
    assume(targets)
    index = data.draw(st.sampled_from(targets))
    lines, fails_at = _break(copy.deepcopy(records), index, how, data)
    stream, failed = _first_failure(lines)
    if fails_at == 0:  # the last record dropped: nothing is wrong, the stream is just not complete
        assert failed is None and not stream.complete
    else:
        assert failed == fails_at
        assert stream.records == fails_at - 1 and stream.failure is not None


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(value, dict) and value:
        return [leaf for key in value for leaf in _leaves(value[key], (*path, key))]
    return [path]


def _replace(value: dict[str, Any], path: tuple[Any, ...], new: Any) -> None:
    for key in path[:-1]:
        value = value[key]
    value[path[-1]] = new


@settings(max_examples=300)
@given(valid_streams(), st.data())
def test_any_changed_value_is_refused_no_earlier_than_its_line_or_accepted_as_written(records, data):
    index = data.draw(st.integers(0, len(records) - 1))
    changed = copy.deepcopy(records)
    path = data.draw(st.sampled_from(_leaves(changed[index])))
    new = data.draw(_json_values | st.sampled_from(["clock-0", "clock-0-0", "ok", "error", "succeeded", OTHER_SHA]))
    _replace(changed[index], path, new)
    stream = TimingStream(OPERATION_ID)
    results: list[TimingRecord] = []
    for number, value in enumerate(changed, start=1):
        try:
            results.append(stream.feed(json.dumps(value).encode()))
        except TimingError:
            assert number >= index + 1, "a record before the changed one was refused"
            return
    # Accepted: the stream holds what the changed record said, and is still a consistent whole.
    assert _matches(results[index], changed[index])
    _consistent(stream)
    _repeats_starts(stream, changed)
