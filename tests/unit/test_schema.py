"""Emitted events conform to the published JSON Schemas; any payload is valid or a ValueError."""

from __future__ import annotations

import json
import logging

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkrun.core.envelope import MAX_TEXT_CHARS
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from sparkrun.schemas import load_schema
from tests.conftest import SPEC_TRANSFER, drain

FEEDBACK = jsonschema.Draft202012Validator(load_schema("feedback"))
LOG = jsonschema.Draft202012Validator(load_schema("log"))


def _as_json(event: dict) -> dict:
    return json.loads(json.dumps(event, allow_nan=False))


def test_schemas_are_valid_draft_2020_12():
    for name in ("feedback", "log", "progress"):
        jsonschema.Draft202012Validator.check_schema(load_schema(name))


def test_unknown_schema_name():
    with pytest.raises(ValueError, match="event type is 'nope'; expected one of feedback, log, progress"):
        load_schema("nope")


def test_every_emitted_event_matches_its_schema(sctx):
    with operation_scope(sctx, name="t"):
        reporter = get_feedback("plug")
        child = reporter.child(host="spark-1", activity_id=f"{reporter.activity_id}.span-1")
        reporter.progress("plain")
        child.progress(
            "Receiving missing layers",
            **{**SPEC_TRANSFER, "metrics": {**SPEC_TRANSFER["metrics"], "note": "x", "ok": True, "none": None}},
        )
        child.warning("counter only", current=3)
        child.report("detail", level="info", status="skipped")
        child.error("failed", status="failed", total=1, total_kind="exact", current=0)
        logging.getLogger("legacy").warning("bridged")
    events = drain(sctx.queue)
    assert {e["type"] for e in events} == {"feedback", "log"}
    for event in events:
        (FEEDBACK if event["type"] == "feedback" else LOG).validate(_as_json(event))


def test_schema_rejects_what_the_producer_rejects():
    base = _as_json(get_feedback("plug").progress("x"))
    for bad in (
        {"total": 3, "total_kind": "unknown"},
        {"total_kind": "exact"},
        {"current": -1, "total_kind": "unknown"},
        {"stage": ""},
        {"metrics": {f"m{i}": i for i in range(33)}},
        {"metrics": {"k" * 129: 1}},
        {"level": "loud"},
        {"surprise": 1},
    ):
        assert not FEEDBACK.is_valid({**base, **bad}), bad


_text = st.one_of(
    st.text(max_size=12),
    st.integers(505, 520).map(lambda n: "t" * n),
    st.integers(16_380, 16_390).map(lambda n: "m" * n),
)
_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    _text,
)
_value = st.one_of(_scalar, st.lists(_scalar, max_size=3), st.dictionaries(st.text(max_size=3), _scalar, max_size=3))
_metrics = st.one_of(
    st.dictionaries(st.one_of(_text, st.integers(0, 3)), _value, max_size=40),
    st.integers(30, 34).map(lambda n: {f"m{i}": i for i in range(n)}),
    _value,
)
_field_values = {
    "stage": st.one_of(_text, _scalar),
    "status": st.one_of(st.sampled_from(["running", "succeeded", "failed", "skipped", "done"]), _scalar),
    "current": _scalar,
    "total": _scalar,
    "total_kind": st.one_of(st.sampled_from(["exact", "upper_bound", "unknown", "approx"]), _scalar),
    "unit": st.one_of(_text, _scalar),
    "metrics": _metrics,
    "colour": _scalar,
}
_fields = st.fixed_dictionaries({}, optional=_field_values)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    message=st.one_of(_text, _scalar),
    level=st.one_of(st.sampled_from(["debug", "info", "progress", "warning", "error"]), _scalar),
    fields=_fields,
)
def test_any_payload_is_schema_valid_or_a_value_error(message, level, fields):
    reporter = get_feedback("property")
    try:
        event = reporter.report(message, level=level, log_message=False, **fields)
    except ValueError:
        return
    FEEDBACK.validate(_as_json(event))


def _identity_is_valid(value: object) -> bool:
    """What ``child()`` accepts for source, host and activity_id: omitted, or a string of 1 to 512 characters."""
    return value is None or (isinstance(value, str) and 0 < len(value) <= MAX_TEXT_CHARS)


#: Omitted and short values weighted up: about a quarter of the draws are then wholly valid identities.
_identity = st.one_of(st.none(), st.text(min_size=1, max_size=12), _text, _scalar)


@settings(max_examples=200, deadline=None)
@given(source=_identity, host=_identity, activity_id=_identity)
def test_any_reporter_identity_is_valid_or_a_value_error(source, host, activity_id):
    root = get_feedback("root")
    given_fields = {"source": source, "host": host, "activity_id": activity_id}
    invalid = [name for name, value in given_fields.items() if not _identity_is_valid(value)]
    if invalid:
        with pytest.raises(ValueError) as caught:
            root.child(source=source, host=host, activity_id=activity_id)
        assert str(caught.value).startswith(tuple(invalid)), (invalid, str(caught.value))
        return
    child = root.child(source=source, host=host, activity_id=activity_id)
    event = child.progress("x", log_message=False)
    FEEDBACK.validate(_as_json(event))
    expected = {
        "source": "root" if source is None else source,  # an omitted source or host is inherited
        "host": host,
        "activity_id": child.activity_id if activity_id is None else activity_id,
        "parent_id": root.activity_id,
    }
    assert (child.source, child.host, child.activity_id, child.parent_id) == tuple(expected.values())
    assert {name: event.get(name) for name in expected} == expected
    assert child.activity_id != root.activity_id and event["operation_id"] == root.operation_id


@pytest.mark.parametrize(
    ("identity", "message"),
    [
        ({"source": ""}, "source is empty; it must be 1 to 512 characters"),
        ({"host": "h" * 513}, "host is 513 characters long; the limit is 512"),
        ({"activity_id": 7}, "activity_id must be a string, not int 7"),
    ],
)
def test_an_invalid_reporter_identity_names_the_field(identity, message):
    with pytest.raises(ValueError) as caught:
        get_feedback("root").child(**identity)
    assert str(caught.value) == message
