"""Emitted events conform to the published JSON Schemas; any payload is valid or a ValueError."""

from __future__ import annotations

import json
import logging

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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


@settings(max_examples=200, deadline=None)
@given(source=st.one_of(_text, _scalar), host=st.one_of(_text, _scalar), activity_id=st.one_of(_text, _scalar))
def test_any_reporter_identity_is_valid_or_a_value_error(source, host, activity_id):
    try:
        reporter = get_feedback("root").child(source=source, host=host, activity_id=activity_id)
    except ValueError:
        return
    FEEDBACK.validate(_as_json(reporter.progress("x", log_message=False)))
