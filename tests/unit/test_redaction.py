"""core.redaction: secrets replaced in values, text, streams cut anywhere, and the outcome."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from sparkrun.core.operation import OperationObserver, operation_scope
from sparkrun.core.redaction import REDACTED, Redactor, StreamRedactor
from sparkrun.errors import ReportedError, error_type_name
from sparkrun.feedback import get_feedback

SECRET = "s3cr3t\nwith-Ťwo-lines"


def _redactor(*secrets: str) -> Redactor:
    redactor = Redactor()
    for secret in secrets:
        redactor.add(secret)
    return redactor


def test_values_keys_and_escaped_forms_are_redacted():
    redactor = _redactor(SECRET)
    value = {SECRET: [f"x {SECRET} y", {"k": json.dumps(SECRET)}], "r": repr(SECRET), "n": 3}
    assert redactor.value(value) == {
        REDACTED: [f"x {REDACTED} y", {"k": f'"{REDACTED}"'}],
        "r": f"'{REDACTED}'",
        "n": 3,
    }


def test_without_secrets_values_are_returned_as_they_are():
    value = {"a": ["b"]}
    assert Redactor().value(value) is value
    assert not Redactor()


def test_a_secret_containing_another_is_replaced_whole():
    redactor = _redactor("abc", "xxabcxx")
    assert redactor.text("1 xxabcxx 2 abc") == f"1 {REDACTED} 2 {REDACTED}"


@given(
    before=st.text(max_size=50),
    after=st.text(max_size=50),
    cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12),
)
def test_a_stream_cut_anywhere_never_lets_the_secret_through(before, after, cuts):
    text = f"{before}{SECRET}{after}{SECRET}"
    pieces, last = [], 0
    for cut in sorted(min(c, len(text)) for c in cuts):
        pieces.append(text[last:cut])
        last = cut
    pieces.append(text[last:])
    stream = StreamRedactor(_redactor(SECRET))
    out = "".join(stream.feed(piece) for piece in pieces) + stream.flush()
    assert out == _redactor(SECRET).text(text)
    assert SECRET not in out


def test_the_outcome_reaches_observers_redacted_with_its_chain():
    seen: list[BaseException | None] = []

    class Observer(OperationObserver):
        def operation_finished(self, info, outcome, error):  # type: ignore[no-untyped-def]
            seen.append(error)

    redactor = _redactor(SECRET)
    try:
        with operation_scope(name="t", observers=[Observer()], processors=(redactor,)):
            get_feedback("p").progress(f"using {SECRET}", log_message=False)
            try:
                raise ValueError(f"inner {SECRET}")
            except ValueError as cause:
                raise RuntimeError(f"outer {SECRET}") from cause
    except RuntimeError as raised:
        assert SECRET in str(raised)  # the caller keeps its own exception
    (error,) = seen
    assert isinstance(error, ReportedError)
    assert (error.type_name, error.message, str(error)) == ("RuntimeError", f"outer {REDACTED}", f"outer {REDACTED}")
    assert f"ValueError: inner {REDACTED}" in error.stacktrace and SECRET not in error.stacktrace
    assert error.__cause__ is None and error.__traceback__ is None
    assert error_type_name(error) == "RuntimeError"
