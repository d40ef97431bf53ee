"""Values whose ``__repr__`` or ``__str__`` raise: a ValueError or a plain copy, never another error."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkrun.feedback import get_feedback


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __str__(self) -> str:
        raise RuntimeError("no str")


class HostileStr(str):
    """A string whose own methods all fail; only its text is usable."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __len__(self) -> int:
        raise RuntimeError("no len")

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("no eq")

    __hash__ = str.__hash__  # usable as a dict key


class HostileInt(int):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class HostileFloat(float):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.fixture
def feedback():
    return get_feedback("unprintable-test")


def _exactly(message: str):
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


_NOT_A_STRING = "must be a string, not Unprintable <unprintable Unprintable>"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda fb: fb.progress(Unprintable()), f"message {_NOT_A_STRING}"),
        (lambda fb: get_feedback(Unprintable()), f"source {_NOT_A_STRING}"),
        (lambda fb: fb.child(source=Unprintable()), f"source {_NOT_A_STRING}"),
        (lambda fb: fb.child(host=Unprintable()), f"host {_NOT_A_STRING}"),
        (lambda fb: fb.progress("x", stage=Unprintable()), f"stage {_NOT_A_STRING}"),
        (lambda fb: fb.progress("x", unit=Unprintable()), f"unit {_NOT_A_STRING}"),
        (
            lambda fb: fb.progress("x", current=Unprintable()),
            "current must be an int or float, not Unprintable <unprintable Unprintable>",
        ),
        (
            lambda fb: fb.progress("x", total=Unprintable()),
            "total must be an int or float, not Unprintable <unprintable Unprintable>",
        ),
        (
            lambda fb: fb.progress("x", metrics={"k": Unprintable()}),
            "metrics['k'] is a Unprintable <unprintable Unprintable>; "
            "metric values must be JSON scalars (str, int, float, bool or None)",
        ),
        (
            lambda fb: fb.progress("x", metrics={Unprintable(): 1}),
            "metrics key <unprintable Unprintable> must be a string",
        ),
        (
            lambda fb: fb.report("x", level=Unprintable()),
            "level is <unprintable Unprintable>; expected one of debug, info, progress, warning, error",
        ),
        (
            lambda fb: fb.progress("x", status=Unprintable()),
            "status is <unprintable Unprintable>; expected one of running, succeeded, failed, skipped",
        ),
        (
            lambda fb: fb.progress("x", total=1, total_kind=Unprintable()),
            "total_kind is <unprintable Unprintable>; expected one of exact, upper_bound, unknown",
        ),
        (
            lambda fb: fb.progress("x", metrics=Unprintable()),
            "metrics must be a dict, not Unprintable <unprintable Unprintable>",
        ),
    ],
)
def test_an_unprintable_object_is_a_value_error(feedback, call, message):
    with _exactly(message):
        call(feedback)


def test_an_unprintable_heartbeat_interval_is_a_value_error(feedback):
    with _exactly("interval is <unprintable HostileFloat>; it must be a number of seconds from 0.01 to 86400"):
        with feedback.heartbeat("busy", interval=HostileFloat(1.0)):
            pass


def _logged(reporter_source: str) -> tuple[logging.Logger, io.StringIO]:
    logger = logging.getLogger(reporter_source)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    return logger, stream


def test_a_hostile_str_message_is_logged_and_returned_as_plain_text(capsys):
    logger, stream = _logged("unprintable-logged")
    try:
        event = get_feedback("unprintable-logged").progress(HostileStr("Copying layers"))
    finally:
        logger.handlers.clear()
    assert type(event["message"]) is str and event["message"] == "Copying layers"
    assert stream.getvalue() == "PROGRESS Copying layers\n"
    assert "Logging error" not in capsys.readouterr().err
    assert json.loads(json.dumps(event))["message"] == "Copying layers"


def test_hostile_strings_are_copied_to_plain_str_everywhere(feedback):
    child = feedback.child(source=HostileStr("plug"), host=HostileStr("spark-1"))
    event = child.report(
        HostileStr("working"),
        level=HostileStr("warning"),
        stage=HostileStr("transfer"),
        status=HostileStr("running"),
        total=4,
        total_kind=HostileStr("upper_bound"),
        unit=HostileStr("bytes"),
        metrics={HostileStr("mirror"): HostileStr("eu-west")},
    )
    for field in ("source", "host", "message", "level", "stage", "status", "total_kind", "unit"):
        assert type(event[field]) is str, field
    assert event["level"] == "warning" and event["total_kind"] == "upper_bound"
    [(key, value)] = event["metrics"].items()
    assert (type(key), type(value), key, value) == (str, str, "mirror", "eu-west")


def test_hostile_strings_break_limits_like_plain_ones(feedback):
    with _exactly("message is 16385 characters long; the limit is 16384"):
        feedback.progress(HostileStr("m" * 16_385))
    with _exactly("message is empty; it must be 1 to 16384 characters"):
        feedback.progress(HostileStr(""))
    with _exactly("metrics['note'] is 513 characters long; the limit for metric strings is 512"):
        feedback.progress("x", metrics={"note": HostileStr("n" * 513)})
    with _exactly("level is 'loud'; expected one of debug, info, progress, warning, error"):
        feedback.report("x", level=HostileStr("loud"))


def test_number_subclasses_are_copied_to_plain_numbers(feedback):
    event = feedback.progress(
        "x",
        current=HostileInt(3),
        total=HostileFloat(4.5),
        total_kind="exact",
        metrics={"i": HostileInt(-2), "f": HostileFloat(0.5)},
    )
    assert (type(event["current"]), type(event["total"])) == (int, float)
    assert [type(value) for value in event["metrics"].values()] == [int, float]
    assert json.loads(json.dumps(event))["metrics"] == {"i": -2, "f": 0.5}


def test_number_subclasses_break_limits_like_plain_numbers(feedback):
    with _exactly("current is -1; counters must be finite and >= 0"):
        feedback.progress("x", current=HostileInt(-1))
    with _exactly("total is nan; counters must be finite and >= 0"):
        feedback.progress("x", total=HostileFloat("nan"))
    with _exactly("metrics['rate'] is inf; metric numbers must be finite"):
        feedback.progress("x", metrics={"rate": HostileFloat("inf")})
    with _exactly(
        f"metrics['n'] is {2**63}; metric integers must be from -9223372036854775808 to 9223372036854775807 (int64)"
    ):
        feedback.progress("x", metrics={"n": HostileInt(2**63)})


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=600), field=st.sampled_from(["message", "stage", "metric value", "metric key"]))
def test_a_hostile_str_behaves_like_its_text(text, field):
    """Same envelope, or the same ValueError, as the plain string."""

    def report(value: str):
        feedback = get_feedback("hostile-property")
        if field == "message":
            return feedback.progress(value, log_message=False)
        if field == "stage":
            return feedback.progress("x", log_message=False, stage=value)
        if field == "metric value":
            return feedback.progress("x", log_message=False, metrics={"k": value})
        return feedback.progress("x", log_message=False, metrics={value: 1})

    def outcome(value: str):
        try:
            event = report(value)
        except ValueError as error:
            return "error", str(error)
        event = {key: item for key, item in event.items() if key not in ("timestamp", "activity_id", "operation_id")}
        return "event", json.dumps(event)

    assert outcome(HostileStr(text)) == outcome(text)
