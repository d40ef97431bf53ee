"""Every bad producer input of the contract raises ValueError naming field, problem and limit."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkrun.feedback import get_feedback


@pytest.fixture
def feedback():
    return get_feedback("validation-test")


def _raises(match: str):
    return pytest.raises(ValueError, match=re.escape(match))


def _exactly(message: str):
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


#: How a 401-digit integer is quoted: the first 57 characters and "...".
_LONG_ONE = "1" + "0" * 56 + "..."
INT64_MAX = 2**63 - 1


def test_message_at_limit_is_accepted(feedback):
    assert feedback.progress("m" * 16_384, log_message=False)["message"] == "m" * 16_384


def test_message_over_limit(feedback):
    with _raises("message is 16385 characters long; the limit is 16384"):
        feedback.progress("m" * 16_385)


def test_empty_message(feedback):
    with _raises("message is empty; it must be 1 to 16384 characters"):
        feedback.progress("")


def test_message_must_be_a_string(feedback):
    with _raises("message must be a string, not int 42"):
        feedback.progress(42)


@pytest.mark.parametrize("field", ["stage", "unit"])
def test_text_field_limits(feedback, field):
    assert feedback.progress("ok", **{field: "s" * 512})[field] == "s" * 512
    with _raises(f"{field} is 513 characters long; the limit is 512"):
        feedback.progress("x", **{field: "s" * 513})
    with _raises(f"{field} is empty; it must be 1 to 512 characters"):
        feedback.progress("x", **{field: ""})


_IDENTITY_BUILDERS = {
    "host": (lambda fb, value: fb.child(host=value), "host"),
    "source": (lambda fb, value: get_feedback(value), "source"),
    "child source": (lambda fb, value: fb.child(source=value), "source"),
    "activity_id": (lambda fb, value: fb.child(activity_id=value), "activity_id"),
}


@pytest.mark.parametrize("case", list(_IDENTITY_BUILDERS))
def test_identity_field_limits(feedback, case):
    build, field = _IDENTITY_BUILDERS[case]
    assert getattr(build(feedback, "s" * 512), field) == "s" * 512
    with _raises(f"{field} is 513 characters long; the limit is 512"):
        build(feedback, "s" * 513)
    with _raises(f"{field} is empty; it must be 1 to 512 characters"):
        build(feedback, "")


def test_foreign_activity_id_equal_to_parent_is_rejected(feedback):
    with _raises("is the parent's own activity id; it must differ"):
        feedback.child(activity_id=feedback.activity_id)


def test_32_metrics_accepted_33_rejected(feedback):
    metrics = {f"m{i}": i for i in range(32)}
    assert feedback.progress("ok", metrics=metrics)["metrics"] == metrics
    with _raises("metrics has 33 entries; the limit is 32"):
        feedback.progress("x", metrics={f"m{i}": i for i in range(33)})


def test_metric_key_limits(feedback):
    assert "k" * 128 in feedback.progress("ok", metrics={"k" * 128: 1})["metrics"]
    with pytest.raises(ValueError, match=r"metrics key 'k+\.\.\. is 129 characters long; the limit is 128"):
        feedback.progress("x", metrics={"k" * 129: 1})
    with _raises("metrics key '' is empty; it must be 1 to 128 characters"):
        feedback.progress("x", metrics={"": 1})
    with _raises("metrics key 7 must be a string"):
        feedback.progress("x", metrics={7: 1})


def test_metric_string_limits(feedback):
    assert feedback.progress("ok", metrics={"note": "n" * 512})["metrics"]["note"] == "n" * 512
    with _raises("metrics['note'] is 513 characters long; the limit for metric strings is 512"):
        feedback.progress("x", metrics={"note": "n" * 513})


@pytest.mark.parametrize(
    ("value", "kind"),
    [([1, 2], "list"), ({"a": 1}, "dict"), (object(), "object"), ((1,), "tuple")],
)
def test_metric_values_must_be_scalars(feedback, value, kind):
    with _raises(f"metrics['rate'] is a {kind} "):
        feedback.progress("x", metrics={"rate": value})
    with _raises("metric values must be JSON scalars (str, int, float, bool or None)"):
        feedback.progress("x", metrics={"rate": value})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_metric_numbers_must_be_finite(feedback, value):
    with _raises(f"metrics['rate'] is {value!r}; metric numbers must be finite"):
        feedback.progress("x", metrics={"rate": value})


def test_metrics_must_be_a_dict(feedback):
    with _raises("metrics must be a dict, not list"):
        feedback.progress("x", metrics=[("a", 1)])


def test_scalar_metric_values_are_accepted(feedback):
    metrics = {"s": "x", "i": -3, "f": 1.5, "t": True, "n": None}
    assert feedback.progress("ok", metrics=metrics)["metrics"] == metrics


@pytest.mark.parametrize("field", ["current", "total"])
@pytest.mark.parametrize("value", [-1, -0.5, math.nan, math.inf])
def test_counters_must_be_finite_and_nonnegative(feedback, field, value):
    with _raises(f"{field} is {value!r}; counters must be finite and >= 0"):
        feedback.progress("x", **{field: value})


@pytest.mark.parametrize("field", ["current", "total"])
@pytest.mark.parametrize("value", [True, False])
def test_counters_must_not_be_booleans(feedback, field, value):
    with _raises(f"{field} must be an int or float, not bool {value!r}"):
        feedback.progress("x", **{field: value})


def test_counter_must_be_a_number(feedback):
    with _raises("current must be an int or float, not str '10'"):
        feedback.progress("x", current="10")


def test_total_with_unknown_kind(feedback):
    with _exactly("total_kind must be exact or upper_bound when total is present (total_kind='unknown')"):
        feedback.progress("x", current=1, total=10, total_kind="unknown")


def test_total_without_a_kind_is_refused_so_no_percentage_is_invented(feedback):
    with _exactly("total_kind must be exact or upper_bound when total is present (total_kind=None)"):
        feedback.progress("x", current=1, total=10)


@pytest.mark.parametrize("kind", ["exact", "upper_bound"])
def test_bounded_kind_without_total(feedback, kind):
    with _raises(f"total_kind is {kind!r} but no total is given; it must be 'unknown' without a total"):
        feedback.progress("x", current=1, total_kind=kind)


def test_unknown_level(feedback):
    with _raises("level is 'loud'; expected one of debug, info, progress, warning, error"):
        feedback.report("x", level="loud")


def test_unknown_status(feedback):
    with _raises("status is 'done'; expected one of running, succeeded, failed, skipped"):
        feedback.progress("x", status="done")


def test_unknown_total_kind(feedback):
    with _raises("total_kind is 'approx'; expected one of exact, upper_bound, unknown"):
        feedback.progress("x", total=3, total_kind="approx")


def test_unknown_field(feedback):
    with _raises("colour is not a feedback field; expected one of host, stage, status, current"):
        feedback.progress("x", colour="red")


def test_rejected_report_delivers_nothing(sctx):
    from sparkrun.core.operation import operation_scope

    with operation_scope(sctx, name="t"):
        with pytest.raises(ValueError):
            get_feedback("p").progress("x", current=-1)
    assert not [e for e in _events(sctx) if e["type"] == "feedback"]


def _events(sctx):
    from tests.conftest import drain

    return drain(sctx.queue)


@pytest.mark.parametrize("interval", [0, -1, -0.5, math.nan, math.inf, True, 1e300, 1e-9, 0.009, 86_400.5, "1"])
def test_heartbeat_interval_must_be_within_range(feedback, interval):
    with _exactly(f"interval is {interval!r}; it must be a number of seconds from 0.01 to 86400"):
        with feedback.heartbeat("busy", interval=interval):
            pass


def test_heartbeat_interval_of_a_huge_integer_is_quoted_short(feedback):
    with _exactly(f"interval is {_LONG_ONE}; it must be a number of seconds from 0.01 to 86400"):
        with feedback.heartbeat("busy", interval=10**400):
            pass


@pytest.mark.parametrize("interval", [0.01, 86_400])
def test_heartbeat_interval_bounds_are_accepted(feedback, interval):
    with feedback.heartbeat("busy", interval=interval):
        pass


@pytest.mark.parametrize("field", ["current", "total"])
def test_integer_counters_fit_int64(feedback, field):
    kind = {"total_kind": "exact"} if field == "total" else {}
    assert feedback.progress("ok", **{field: INT64_MAX}, **kind)[field] == INT64_MAX
    with _exactly(f"{field} is {INT64_MAX + 1}; integer counters must be at most 9223372036854775807 (int64)"):
        feedback.progress("x", **{field: INT64_MAX + 1})


@pytest.mark.parametrize("field", ["current", "total"])
def test_a_huge_integer_counter_is_a_value_error_quoted_short(feedback, field):
    with _exactly(f"{field} is {_LONG_ONE}; integer counters must be at most 9223372036854775807 (int64)"):
        feedback.progress("x", **{field: 10**400})
    with _exactly(f"{field} is -1{'0' * 55}...; counters must be finite and >= 0"):
        feedback.progress("x", **{field: -(10**400)})


def test_a_float_counter_beyond_int64_is_fine(feedback):
    assert feedback.progress("ok", current=1e300)["current"] == 1e300


def test_metric_integers_fit_int64(feedback):
    metrics = {"low": -(2**63), "high": INT64_MAX}
    assert feedback.progress("ok", metrics=metrics)["metrics"] == metrics
    bound = "metric integers must be from -9223372036854775808 to 9223372036854775807 (int64)"
    with _exactly(f"metrics['n'] is {INT64_MAX + 1}; {bound}"):
        feedback.progress("x", metrics={"n": INT64_MAX + 1})
    with _exactly(f"metrics['n'] is {-(2**63) - 1}; {bound}"):
        feedback.progress("x", metrics={"n": -(2**63) - 1})
    with _exactly(f"metrics['n'] is {_LONG_ONE}; {bound}"):
        feedback.progress("x", metrics={"n": 10**400})


def test_a_huge_integer_is_described_by_its_size(feedback):
    bound = "metric integers must be from -9223372036854775808 to 9223372036854775807 (int64)"
    with _exactly(f"metrics['n'] is <int of 16610 bits>; {bound}"):
        feedback.progress("x", metrics={"n": 10**5000})


def test_booleans_are_unchanged_by_the_int64_bound(feedback):
    assert feedback.progress("ok", metrics={"warm": True})["metrics"] == {"warm": True}
    with _exactly("current must be an int or float, not bool True"):
        feedback.progress("x", current=True)


@settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.integers(), st.integers(-(2**64), 2**64)))
def test_integers_are_accepted_exactly_within_int64(value):
    feedback = get_feedback("int64-property")
    counter_ok = 0 <= value <= INT64_MAX
    metric_ok = -(2**63) <= value <= INT64_MAX
    try:
        event = feedback.progress("x", log_message=False, current=value, metrics={"n": value})
    except ValueError as error:
        assert not (counter_ok and metric_ok)
        assert str(error).startswith("current is " if not counter_ok else "metrics['n'] is ")
    else:
        assert counter_ok and metric_ok
        assert type(event["current"]) is int and type(event["metrics"]["n"]) is int
