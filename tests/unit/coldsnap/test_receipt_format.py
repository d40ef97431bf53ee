"""coldsnap receipts are read strictly: every refusal is a ReceiptError naming the file, field and value."""

from __future__ import annotations

import json
import os
import re
from fractions import Fraction
from pathlib import Path

import pytest

from sparkrun.errors import SparkrunError
from sparkrun.plugins.coldsnap.receipt import MAX_RECEIPT_BYTES, Receipt, ReceiptError, parse_receipt, read_receipt
from tests.unit.coldsnap.records import REQUEST_SHA, receipt


def _exactly(message: str):
    return pytest.raises(ReceiptError, match=f"^{re.escape(message)}$")


def _write(tmp_path: Path, value: object) -> Path:
    path = tmp_path / "operation.json"
    path.write_text(json.dumps(value, indent=2) + "\n")
    return path


def _refused(value: dict, message: str) -> None:
    with _exactly(f"receipt: {message}"):
        parse_receipt(json.dumps(value))


# Reading


def test_a_missing_receipt_is_tolerated(tmp_path):
    assert read_receipt(tmp_path / "operation.json") is None


def test_a_receipt_in_a_missing_directory_is_tolerated(tmp_path):
    assert read_receipt(tmp_path / "never" / "operation.json") is None


def test_a_good_receipt_is_read(tmp_path):
    parsed = read_receipt(_write(tmp_path, receipt()))
    assert isinstance(parsed, Receipt)
    assert (parsed.operation_id, parsed.operation, parsed.state) == ("example-coldsnap-restore", "restore", "succeeded")
    assert (parsed.engine, parsed.snapshot_driver, parsed.replay_semantics) == ("process", "n580", "reconcile-replace")
    assert parsed.request_sha256 == REQUEST_SHA and parsed.duration_seconds == 4.376543211
    assert parsed.started_at == "2025-01-31T12:00:00.123456789Z"
    assert parsed.started_at_unix == 1738324800.1234567 and parsed.completed_at_unix == 1738324804.5
    assert [span.id for span in parsed.spans] == ["worker-0-1", "adapter-1", "controller-1"]
    assert list(parsed.clocks) == ["controller", "worker-0"]
    assert parsed.timing == receipt()["timing"] and parsed.result == receipt()["result"]
    assert parsed.error is None and parsed.error_message is None and parsed.error_type is None


def test_receipt_errors_are_sparkrun_errors():
    assert issubclass(ReceiptError, SparkrunError)


def test_a_receipt_that_is_not_json_names_the_file(tmp_path):
    path = tmp_path / "operation.json"
    path.write_text('{"format": 2,')
    with _exactly(f"receipt {path}: not JSON (Expecting property name enclosed in double quotes at line 1 column 14)"):
        read_receipt(path)


def test_a_receipt_with_trailing_data_is_refused(tmp_path):
    path = tmp_path / "operation.json"
    path.write_text(json.dumps(receipt()) + "\n{}\n")
    with _exactly(f"receipt {path}: trailing data after the JSON value at line 2 column 1"):
        read_receipt(path)


def test_a_receipt_with_a_duplicate_key_is_refused():
    text = json.dumps(receipt())
    with _exactly("receipt: duplicate key 'state'"):
        parse_receipt('{"state": "failed", ' + text[1:])


def test_a_receipt_over_64_mib_is_refused(tmp_path):
    path = tmp_path / "operation.json"
    with open(path, "wb") as out:
        out.truncate(MAX_RECEIPT_BYTES + 1)
    with _exactly(f"receipt is too large (path={path}, 67108865 bytes, limit 67108864 bytes)"):
        read_receipt(path)


def test_a_receipt_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "operation.json"
    path.write_bytes(b'{"kind": "\xff"}')
    with _exactly(f"receipt is not UTF-8 text (path={path}, byte 10)"):
        read_receipt(path)


def test_a_fifo_receipt_is_refused(tmp_path):
    os.mkfifo(tmp_path / "operation.json")
    with _exactly(f"receipt is not a regular file (path={tmp_path / 'operation.json'}, a named pipe)"):
        read_receipt(tmp_path / "operation.json")


def test_a_receipt_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "operation.json").mkdir()
    with _exactly(f"receipt is not a regular file (path={tmp_path / 'operation.json'}, a directory)"):
        read_receipt(tmp_path / "operation.json")


# Identity of the document


def test_a_receipt_must_be_an_object():
    with _exactly("receipt: the receipt must be an object, not array []"):
        parse_receipt("[]")


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"kind": "coldsnap-operation-request"},
            "kind is 'coldsnap-operation-request'; expected 'coldsnap-operation-receipt'",
        ),
        ({"format": 1}, "format is 1; expected 2"),
        ({"format": 3}, "format is 3; expected 2"),
        ({"format": "2"}, "format is '2'; expected 2"),
        ({"format": 2.0}, "format is 2.0; expected 2"),
    ],
)
def test_kind_and_format_are_checked_first(changes, message):
    _refused(receipt(**changes, extra="ignored until kind and format are right"), message)


@pytest.mark.parametrize("key", ["kind", "format"])
def test_kind_and_format_are_required(key):
    value = receipt()
    del value[key]
    expected = "'coldsnap-operation-receipt'" if key == "kind" else "2"
    _refused(value, f"has no {key!r}; expected {expected}")


# Fields


@pytest.mark.parametrize(
    "key",
    [
        "operation_id",
        "operation",
        "state",
        "request_sha256",
        "engine",
        "snapshot_driver",
        "replay_semantics",
        "started_at",
        "completed_at",
        "duration_seconds",
        "timing",
        "result",
    ],
)
def test_every_field_is_required(key):
    value = receipt()
    del value[key]
    _refused(value, f"the receipt has no {key!r}; it is required")


def test_unknown_fields_of_the_receipt_and_its_result_are_ignored():
    value = receipt(warnings=[])
    value["result"]["artifacts"] = {}
    parsed = parse_receipt(json.dumps(value))
    assert parsed.operation_id == value["operation_id"] and "artifacts" in parsed.result


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"operation_id": "bad id"},
            "operation_id is 'bad id'; an id is 1 to 128 characters from A-Z a-z 0-9 . _ - "
            "and starts with a letter or digit",
        ),
        (
            {"operation": "thaw"},
            "operation is 'thaw'; expected one of capture, publish, publish-native, restore, sleep, wake, status",
        ),
        ({"state": "cancelled"}, "state is 'cancelled'; expected one of succeeded, failed"),
        ({"state": None}, "state is None; expected one of succeeded, failed"),
        (
            {"request_sha256": "sha256:abc"},
            "request_sha256 is 'sha256:abc'; expected 'sha256:' followed by 64 lowercase hex digits",
        ),
        ({"engine": ""}, "engine is empty; it must be 1 to 128 characters"),
        ({"engine": ["vllm"]}, "engine must be a string, not array ['vllm']"),
        ({"snapshot_driver": {"id": "n580"}}, "snapshot_driver must be a string, not object {'id': 'n580'}"),
        ({"replay_semantics": 1}, "replay_semantics must be a string, not int 1"),
        ({"duration_seconds": -0.5}, "duration_seconds is -0.5; it must be a finite number of seconds >= 0"),
        ({"duration_seconds": "4"}, "duration_seconds must be a number, not string '4'"),
        ({"result": []}, "result must be an object, not array []"),
        ({"timing": None}, "timing must be an object, not null None"),
    ],
)
def test_ill_typed_fields_are_refused(changes, message):
    _refused(receipt(**changes), message)


def test_invalid_timing_is_refused_with_its_path():
    value = receipt()
    value["timing"]["spans"][1]["duration_seconds"] = -2
    _refused(value, "timing.spans[1].duration_seconds is -2; it must be a finite number of seconds >= 0")


def test_timing_references_must_resolve():
    value = receipt()
    value["timing"]["clocks"].pop()
    _refused(value, "timing.spans[0].clock is 'worker-0'; timing.clocks has no clock with that id")


def test_result_may_hold_any_of_its_keys_with_any_json_values():
    parsed = parse_receipt(json.dumps(receipt(result={"artifact": "a", "output": [1, {}], "prepared": True})))
    assert parsed.result == {"artifact": "a", "output": [1, {}], "prepared": True}


def test_result_may_be_empty():
    assert parse_receipt(json.dumps(receipt(result={}))).result == {}


# error


def test_a_failed_receipt_needs_an_error():
    _refused(receipt(state="failed"), "has no 'error'; a failed receipt needs one")


def test_a_failed_receipt_may_give_its_error_as_a_message():
    parsed = parse_receipt(json.dumps(receipt(state="failed", error="capsule pull failed")))
    assert parsed.error == "capsule pull failed" and parsed.error_message == "capsule pull failed"
    assert parsed.error_type is None


def test_a_failed_receipt_may_give_its_error_as_an_object():
    parsed = parse_receipt(json.dumps(receipt(state="failed", error={"message": "no GPU", "type": "HardwareError"})))
    assert (parsed.error_message, parsed.error_type) == ("no GPU", "HardwareError")


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("", "error is empty; a failed receipt needs a message"),
        (None, "error is None; expected a message or an object with a message"),
        (["no GPU"], "error is ['no GPU']; expected a message or an object with a message"),
        ({}, "error has no 'message'; it is required"),
        ({"message": ""}, "error.message is ''; a failed receipt needs a non-empty message"),
        ({"message": 5}, "error.message is 5; a failed receipt needs a non-empty message"),
        ({"message": "x", "type": ""}, "error.type is empty; it must be 1 to 128 characters"),
        ({"message": "x", "trace": "..."}, "error has an unknown key 'trace'; the keys are message, type"),
    ],
)
def test_a_failed_receipt_error_is_a_message_or_an_object_with_one(error, message):
    _refused(receipt(state="failed", error=error), message)


@pytest.mark.parametrize(
    ("error", "shown"), [("oops", "'oops'"), (None, "None"), ({"message": "x"}, "{'message': 'x'}")]
)
def test_a_succeeded_receipt_has_no_error(error, shown):
    _refused(receipt(error=error), f"error is {shown}; a succeeded receipt has no error")


# Timestamps


@pytest.mark.parametrize(
    ("text", "unix"),
    [
        ("2025-01-31T12:00:00.123456789Z", 1738324800.123456789),
        ("2025-01-31T12:00:00Z", 1738324800.0),
        ("2025-01-31t12:00:00.5z", 1738324800.5),
        ("2025-01-31T14:30:00.25+02:30", 1738324800.25),
        ("2025-01-31T07:00:00-05:00", 1738324800.0),
        ("1970-01-01T00:00:00.000000001Z", 1e-9),
        ("2024-02-29T00:00:00Z", 1709164800.0),
    ],
)
def test_rfc3339_timestamps_are_parsed_to_unix_seconds(text, unix):
    assert parse_receipt(json.dumps(receipt(started_at=text))).started_at_unix == unix


def test_unix_seconds_are_the_correctly_rounded_exact_nanoseconds():
    parsed = parse_receipt(json.dumps(receipt(completed_at="2025-01-31T12:00:04.999999999Z")))
    assert parsed.completed_at_unix == float(Fraction(1738324804_999999999, 10**9))
    assert parsed.completed_at == "2025-01-31T12:00:04.999999999Z"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("2025-01-31 12:00:00Z", "; expected an RFC 3339 timestamp such as '2025-01-31T12:00:00.123456789Z'"),
        ("2025-01-31T12:00:00", "; expected an RFC 3339 timestamp such as '2025-01-31T12:00:00.123456789Z'"),
        (
            "2025-01-31T12:00:00.1234567891Z",
            "; expected an RFC 3339 timestamp such as '2025-01-31T12:00:00.123456789Z'",
        ),
        ("2025-01-31T12:00:00.Z", "; expected an RFC 3339 timestamp such as '2025-01-31T12:00:00.123456789Z'"),
        ("٢٠٢٥-01-31T12:00:00Z", "; expected an RFC 3339 timestamp such as '2025-01-31T12:00:00.123456789Z'"),
        ("2025-02-30T12:00:00Z", "; it is not a real date and time (day is out of range for month)"),
        ("2025-01-31T24:00:00Z", "; it is not a real date and time (hour must be in 0..23)"),
        ("2025-01-31T12:00:00+24:00", "; its UTC offset is out of range"),
    ],
)
def test_malformed_timestamps_are_refused(text, why):
    _refused(receipt(started_at=text), f"started_at is {text!r}{why}")


def test_a_timestamp_must_be_text():
    _refused(receipt(completed_at=1738324804.5), "completed_at must be a string, not float 1738324804.5")
