"""core.strict_json: what it accepts any strict JSON parser reads; what it refuses names the field."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkrun.core import strict_json

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20
)


def _strict_round_trip(value: object) -> bool:
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
        text.encode("utf-8")
    except (ValueError, UnicodeEncodeError):
        return False
    return all(
        -(2**63) <= item < 2**63 for item in _integers(value)
    )  # what a 64-bit parser (Go, Rust, JavaScript BigInt-free) reads back


def _integers(value: object) -> list[int]:
    if type(value) is int:
        return [value]
    if isinstance(value, dict):
        return [i for item in value.values() for i in _integers(item)]
    if isinstance(value, list):
        return [i for item in value for i in _integers(item)]
    return []


@given(_values)
def test_problem_is_none_exactly_for_values_every_parser_reads(value):
    assert (strict_json.problem(value) is None) == _strict_round_trip(value)


@given(_values)
def test_made_safe_gives_strict_json_or_a_named_error(value):
    try:
        safe = strict_json.made_safe(value)
    except strict_json.StrictJSONError as error:
        assert str(error).startswith("value")
        return
    assert strict_json.problem(safe) is None
    assert json.loads(strict_json.dumps(safe)) == safe


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": {"b": [1, math.inf]}}, "value.a.b[1] is inf; JSON numbers must be finite"),
        ({"a": math.nan}, "value.a is nan; JSON numbers must be finite"),
        ({"n": 2**63}, "value.n has 19 digits; JSON integers must fit in 64 bits (at most 9223372036854775807)"),
        ({"s": "ok\udcff"}, "value.s holds a lone surrogate (\\udcff at character 2); strings must be valid Unicode"),
        (
            {"k\ud800": 1},
            "value key 'k\\ud800' holds a lone surrogate (\\ud800 at character 1); strings must be valid Unicode",
        ),
        ({"o": object()}, "value.o is a object; expected a JSON value"),
    ],
)
def test_each_problem_names_the_field(value, message):
    assert strict_json.problem(value) == message


def test_a_non_utf8_file_name_becomes_replacement_characters():
    import os

    name = os.fsdecode(b"weights-\xff.bin")
    assert strict_json.made_safe({"file": name}) == {"file": "weights-\ufffd.bin"}


def test_dumps_refuses_non_finite_numbers_and_writes_ascii():
    assert strict_json.dumps({"é": "\u2028"}) == '{"\\u00e9":"\\u2028"}'
    with pytest.raises(ValueError):
        strict_json.dumps({"x": math.nan})
