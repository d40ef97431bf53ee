"""coldsnap.receipt: hard checks against the request, soft warnings about the stream, preparation, startup."""

from __future__ import annotations

import copy
import json
import re

import pytest

from sparkrun.errors import SparkrunError
from sparkrun.plugins.coldsnap.canonical import sha256_digest
from sparkrun.plugins.coldsnap.receipt import (
    STARTUP_OBSERVATION,
    PreparationError,
    ReceiptError,
    check_preparation,
    check_receipt,
    parse_receipt,
    startup_measurements,
    stream_warnings,
)
from sparkrun.plugins.coldsnap.timing import TimingError, TimingStream
from tests.unit.coldsnap.records import (
    OPERATION_ID,
    OTHER_SHA,
    REQUEST_SHA,
    clock,
    complete_stream_for,
    done,
    feed_all,
    line,
    receipt,
    request,
    span,
)


def _parsed(**changes):
    return parse_receipt(json.dumps(receipt(**changes)))


def _exactly(error: type[Exception], message: str):
    return pytest.raises(error, match=f"^{re.escape(message)}$")


# check_receipt


def test_a_receipt_that_matches_the_request_and_exit_code_passes():
    check_receipt(_parsed(), request=request(), exit_code=0)
    check_receipt(_parsed(state="failed", error="boom"), request=request(), exit_code=3)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"operation_id": "other-restore"},
            "receipt operation_id is 'other-restore'; the request's id is 'example-coldsnap-restore'",
        ),
        (
            {"operation": "wake", "replay_semantics": "convergent"},
            "receipt operation is 'wake'; the request's operation is 'restore'",
        ),
        ({"engine": "vllm"}, "receipt engine is 'vllm'; the request's launch.engine is 'process'"),
        ({"snapshot_driver": "n610"}, "receipt snapshot_driver is 'n610'; the request's snapshot_driver.id is 'n580'"),
    ],
)
def test_a_receipt_about_something_else_is_a_hard_error(changes, message):
    with _exactly(ReceiptError, message):
        check_receipt(_parsed(**changes), request=request(), exit_code=0)


def test_identity_is_checked_before_the_exit_code():
    with _exactly(ReceiptError, "receipt engine is 'vllm'; the request's launch.engine is 'process'"):
        check_receipt(_parsed(engine="vllm"), request=request(), exit_code=1)


def test_a_request_without_the_field_cannot_be_matched():
    bare = request()
    del bare["launch"]
    with _exactly(ReceiptError, "receipt engine is 'process'; the request's launch.engine is None"):
        check_receipt(_parsed(), request=bare, exit_code=0)


def test_a_failed_receipt_with_exit_code_0_is_a_hard_error():
    with _exactly(
        ReceiptError, "receipt state is 'failed', but the controller exited with code 0; expected 'succeeded'"
    ):
        check_receipt(_parsed(state="failed", error="boom"), request=request(), exit_code=0)


@pytest.mark.parametrize("exit_code", [1, 2, 143, -15])
def test_a_succeeded_receipt_with_a_nonzero_exit_code_is_a_hard_error(exit_code):
    with _exactly(
        ReceiptError,
        f"receipt state is 'succeeded', but the controller exited with code {exit_code}; expected 'failed'",
    ):
        check_receipt(_parsed(), request=request(), exit_code=exit_code)


# stream_warnings


def _matching_stream(value: dict | None = None, state: str = "succeeded") -> TimingStream:
    return feed_all(complete_stream_for(value or receipt(), state))


def test_a_stream_that_agrees_with_the_receipt_gives_no_warning():
    assert stream_warnings(_parsed(), _matching_stream(), None) == []


def test_the_timing_digest_is_of_the_timing_object_as_decoded():
    value = receipt()
    value["timing"]["spans"][0]["attributes"] = {}  # an empty object the controller kept: part of the digest
    stream = _matching_stream(value)
    assert stream.timing_sha256 == sha256_digest(value["timing"]) != sha256_digest(receipt()["timing"])
    assert stream_warnings(parse_receipt(json.dumps(value)), stream, None) == []


def test_a_reader_error_is_a_warning():
    warnings = stream_warnings(
        _parsed(), _matching_stream(), "cannot read the timing file (path=/x, Permission denied)"
    )
    assert warnings == [
        "The timing stream could not be read to its end: cannot read the timing file (path=/x, Permission denied)."
    ]


def test_a_stream_that_failed_validation_is_a_warning_and_is_not_compared_further():
    stream = TimingStream(OPERATION_ID)
    with pytest.raises(TimingError):
        stream.feed(b"[]\n")
    assert stream_warnings(_parsed(), stream, None) == [
        "The timing stream could not be read to its end: timing line 1: the record must be an object, not array []."
    ]


def test_no_stream_at_all_is_a_warning():
    assert stream_warnings(_parsed(), None, None) == ["The controller wrote no timing stream records."]
    assert stream_warnings(_parsed(), TimingStream(OPERATION_ID), None) == [
        "The controller wrote no timing stream records."
    ]


def test_an_incomplete_stream_is_a_warning():
    records = complete_stream_for(receipt())[:4]
    assert stream_warnings(_parsed(), feed_all(records), None) == [
        "The timing stream ended after 4 records without stream_complete (1 spans still open)."
    ]


def test_a_stream_for_another_request_digest_is_a_warning():
    records = complete_stream_for(receipt())
    for item in records:
        item["request_sha256"] = OTHER_SHA
    assert stream_warnings(_parsed(), feed_all(records), None) == [
        f"The timing stream's request_sha256 {OTHER_SHA} differs from the receipt's {REQUEST_SHA}."
    ]


def test_a_timing_digest_that_does_not_match_the_receipt_is_a_warning():
    value = receipt()
    stream = _matching_stream(value)
    value["timing"]["spans"][0]["duration_seconds"] = 2.75
    digest = sha256_digest(value["timing"])
    assert stream_warnings(parse_receipt(json.dumps(value)), stream, None) == [
        f"The timing stream's timing_sha256 {stream.timing_sha256} differs from {digest}, "
        "the digest of the receipt's timing."
    ]


def test_a_stream_state_that_differs_from_the_receipt_is_a_warning():
    assert stream_warnings(_parsed(), _matching_stream(state="failed"), None) == [
        "The timing stream ended 'failed', but the receipt's state is 'succeeded'."
    ]


def test_several_stream_problems_are_each_reported():
    value = receipt()
    records = complete_stream_for(value, "failed")
    for item in records:
        item["request_sha256"] = OTHER_SHA
    records[-1]["timing_sha256"] = OTHER_SHA
    assert len(stream_warnings(_parsed(), feed_all(records), None)) == 3


@pytest.mark.parametrize(
    ("operation", "semantics"),
    [
        ("capture", "conflict-on-existing-output"),
        ("publish", "content-idempotent"),
        ("publish-native", "content-idempotent"),
        ("restore", "reconcile-replace"),
        ("sleep", "convergent"),
        ("wake", "convergent"),
        ("status", "convergent"),
    ],
)
def test_the_contract_s_replay_semantics_give_no_warning(operation, semantics):
    assert stream_warnings(_parsed(operation=operation, replay_semantics=semantics), _matching_stream(), None) == []


def test_other_replay_semantics_are_a_warning_not_an_error():
    assert stream_warnings(_parsed(replay_semantics="convergent"), _matching_stream(), None) == [
        "The receipt's replay_semantics is 'convergent'; a restore has 'reconcile-replace'."
    ]


def test_a_prepare_only_run_is_safe_to_repeat():
    parsed = _parsed(replay_semantics="safe-repeat")
    assert stream_warnings(parsed, _matching_stream(), None, prepare_only=True) == []
    assert stream_warnings(_parsed(), _matching_stream(), None, prepare_only=True) == [
        "The receipt's replay_semantics is 'reconcile-replace'; a restore prepare-only run has 'safe-repeat'."
    ]


def test_a_receipt_for_another_request_digest_is_a_warning_when_the_digest_is_given():
    assert stream_warnings(_parsed(), _matching_stream(), None, request_sha256=REQUEST_SHA) == []
    assert stream_warnings(_parsed(), _matching_stream(), None, request_sha256=OTHER_SHA) == [
        f"The receipt's request_sha256 {REQUEST_SHA} differs from {OTHER_SHA}, the digest sparkrun computed for the "
        "request it sent."
    ]


# check_preparation


def _preparation(**changes) -> dict:
    return {
        "kind": "coldsnap-restore-preparation",
        "operation_id": OPERATION_ID,
        "provider": "file",
        "snapshot_driver": {"id": "n580"},
        "capsules": ["weights", "runtime"],
        **changes,
    }


def test_a_matching_preparation_is_returned_whole():
    assert check_preparation(json.dumps(_preparation(), indent=2) + "\n", request=request()) == _preparation()


def test_preparation_errors_are_sparkrun_errors():
    assert issubclass(PreparationError, SparkrunError)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            _preparation(kind="coldsnap-operation-receipt"),
            "restore preparation kind is 'coldsnap-operation-receipt'; expected 'coldsnap-restore-preparation'",
        ),
        (
            {k: v for k, v in _preparation().items() if k != "kind"},
            "restore preparation has no kind; expected 'coldsnap-restore-preparation'",
        ),
        (
            _preparation(operation_id="other-restore"),
            "restore preparation operation_id is 'other-restore'; the request's id is 'example-coldsnap-restore'",
        ),
        (
            {k: v for k, v in _preparation().items() if k != "operation_id"},
            "restore preparation has no operation_id; the request's id is 'example-coldsnap-restore'",
        ),
        (
            _preparation(provider="s3"),
            "restore preparation provider is 's3'; the request's artifact.provider is 'file'",
        ),
        (
            _preparation(provider=None),
            "restore preparation provider is None; the request's artifact.provider is 'file'",
        ),
        (
            _preparation(snapshot_driver={"id": "n610"}),
            "restore preparation snapshot_driver.id is 'n610'; the request's snapshot_driver.id is 'n580'",
        ),
        (
            _preparation(snapshot_driver="n580"),
            "restore preparation has no snapshot_driver.id; the request's snapshot_driver.id is 'n580'",
        ),
        (
            _preparation(snapshot_driver={}),
            "restore preparation has no snapshot_driver.id; the request's snapshot_driver.id is 'n580'",
        ),
    ],
)
def test_a_preparation_about_another_request_is_refused(value, message):
    with _exactly(PreparationError, message):
        check_preparation(json.dumps(value), request=request())


@pytest.mark.parametrize(
    ("stdout", "message"),
    [
        ("", "restore preparation output: not JSON (Expecting value at line 1 column 1); expected one JSON object"),
        (
            "preparing...\n{}",
            "restore preparation output: not JSON (Expecting value at line 1 column 1); expected one JSON object",
        ),
        (
            '{"kind": 1}\nDone',
            "restore preparation output: trailing data after the JSON value at line 2 column 1; "
            "expected one JSON object",
        ),
        ("[1]", "restore preparation output is [1]; expected one JSON object"),
        ('{"a": 1, "a": 1}', "restore preparation output: duplicate key 'a'; expected one JSON object"),
    ],
)
def test_preparation_output_must_be_one_json_object(stdout, message):
    with _exactly(PreparationError, message):
        check_preparation(stdout, request=request())


def test_preparation_output_is_bounded():
    padding = " " * (4 * 1024 * 1024)
    with _exactly(
        PreparationError, "restore preparation output is 4194305 characters long; the limit is 4194304 bytes (4 MiB)"
    ):
        check_preparation(padding + "{", request=request())
    with _exactly(
        PreparationError, "restore preparation output is 4194305 bytes long; the limit is 4194304 bytes (4 MiB)"
    ):
        check_preparation(padding[:-3] + "é{}", request=request())


# startup_measurements


def _with_spans(*spans: dict, clocks: list[dict] | None = None):
    value = receipt()
    value["timing"] = {
        "format": 1,
        "clocks": clocks or [clock(), clock("worker-0", unit="unit-0"), clock("worker-1", unit="unit-1")],
        "spans": list(spans),
    }
    return parse_receipt(json.dumps(value))


def _startup(span_id: str, name: str, duration: float, status: str = "ok", **fields) -> dict:
    return done(span(span_id, name=f"runtime.startup_{name}", **fields), duration, status)


def test_the_startup_observation_name():
    assert STARTUP_OBSERVATION == "rank0-acceptance-v1"


def test_startup_measurements_of_the_rank0_unit():
    parsed = _with_spans(
        _startup("a", "port_open", 1.5, attributes={"unit": "unit-0"}),
        _startup("b", "http_ready", 2.25, clock="worker-0"),
        _startup("c", "ttft", 3.0),
    )
    assert startup_measurements(parsed) == {"ttr_port_open_s": 1.5, "ttr_http_ready_s": 2.25, "ttft_s": 3.0}


def test_only_the_measurements_present_are_reported():
    assert startup_measurements(_with_spans(_startup("a", "ttft", 0.5))) == {"ttft_s": 0.5}
    assert startup_measurements(_with_spans(done(span()))) == {}
    assert startup_measurements(_parsed()) == {"ttr_port_open_s": 2.5}  # the typical stream's worker span


def test_other_units_are_not_rank0():
    parsed = _with_spans(
        _startup("a", "port_open", 1.5, attributes={"unit": "unit-1"}),
        _startup("b", "http_ready", 2.25, clock="worker-1"),
    )
    assert startup_measurements(parsed) == {}


def test_the_span_attribute_unit_wins_over_the_clock_unit():
    parsed = _with_spans(_startup("a", "port_open", 1.5, clock="worker-1", attributes={"unit": "unit-0"}))
    assert startup_measurements(parsed) == {"ttr_port_open_s": 1.5}


def test_failed_startup_spans_are_not_measurements():
    assert startup_measurements(_with_spans(_startup("a", "ttft", 9.0, status="error"))) == {}


def test_a_span_naming_unit0_wins_over_one_naming_no_unit():
    parsed = _with_spans(
        _startup("a", "ttft", 9.0),
        _startup("b", "ttft", 3.0, clock="worker-0"),
        _startup("c", "ttft", 4.0, clock="worker-0"),
    )
    assert startup_measurements(parsed) == {"ttft_s": 3.0}


def test_measurements_are_floats():
    measured = startup_measurements(_with_spans(_startup("a", "ttft", 2, clock="worker-0")))
    assert measured == {"ttft_s": 2.0} and type(measured["ttft_s"]) is float


def test_the_receipt_is_not_changed_by_the_checks():
    value = receipt()
    before = copy.deepcopy(value)
    parsed = parse_receipt(json.dumps(value))
    check_receipt(parsed, request=request(), exit_code=0)
    stream_warnings(parsed, None, None)
    startup_measurements(parsed)
    assert parsed.timing == before["timing"]
    assert line(value) == line(before)
