"""coldsnap.canonical: one byte spelling per value, digests both sides agree on, strict decoding."""

from __future__ import annotations

import hashlib
import json
import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkrun.plugins.coldsnap.canonical import (
    MAX_REQUEST_BYTES,
    canonical_json,
    drop_empty,
    is_digest,
    is_safe_id,
    request_text,
    sha256_digest,
    strict_loads,
)

_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
)
_json_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


def _exactly(message: str):
    return pytest.raises(ValueError, match=f"^{re.escape(message)}$")


def _reinserted(value):
    """``value`` with every mapping's keys inserted in reverse order."""
    if isinstance(value, dict):
        return {key: _reinserted(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reinserted(item) for item in value]
    return value


# drop_empty


def test_drop_empty_removes_none_empty_text_lists_and_mappings():
    assert drop_empty({"a": None, "b": "", "c": [], "d": {}, "e": "x"}) == {"e": "x"}


def test_drop_empty_judges_a_mapping_after_cleaning_inside_it():
    assert drop_empty({"outer": {"inner": {"leaf": None}}, "keep": 1}) == {"keep": 1}


def test_drop_empty_keeps_list_items_in_place_and_cleans_inside_them():
    value = {"units": [{"id": "unit-0", "image": None}, None, "", {}, []]}
    assert drop_empty(value) == {"units": [{"id": "unit-0"}, None, "", {}, []]}


def test_drop_empty_keeps_zero_false_and_whitespace():
    assert drop_empty({"n": 0, "f": 0.0, "b": False, "s": " "}) == {"n": 0, "f": 0.0, "b": False, "s": " "}


def test_drop_empty_keeps_a_list_whose_items_became_empty():
    assert drop_empty({"mounts": [{"source": None}]}) == {"mounts": [{}]}


def test_drop_empty_leaves_its_argument_alone():
    value = {"a": None, "b": {"c": ""}}
    drop_empty(value)
    assert value == {"a": None, "b": {"c": ""}}


# canonical_json


def test_canonical_json_sorts_keys_without_spaces():
    assert canonical_json({"b": 1, "a": {"d": [1, 2], "c": None}}) == b'{"a":{"c":null,"d":[1,2]},"b":1}'


def test_canonical_json_escapes_non_ascii_and_astral_characters_as_surrogate_pairs():
    assert canonical_json("é€😀") == b'"\\u00e9\\u20ac\\ud83d\\ude00"'


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        (0.1, b"0.1"),
        (1e-07, b"1e-07"),
        (1e16, b"1e+16"),
        (2.0, b"2.0"),
        (-0.0, b"-0.0"),
        (10**20, b"100000000000000000000"),
    ],
)
def test_canonical_json_spells_floats_as_repr_and_keeps_integers(value, spelled):
    assert canonical_json(value) == spelled


def test_canonical_json_writes_booleans_and_null():
    assert canonical_json([True, False, None]) == b"[true,false,null]"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"a": [1, math.nan]}, "value.a[1] is nan; canonical JSON numbers must be finite"),
        ({"a": math.inf}, "value.a is inf; canonical JSON numbers must be finite"),
        ([-math.inf], "value[0] is -inf; canonical JSON numbers must be finite"),
        ({"a": {1: "x"}}, "value.a has the key 1; canonical JSON keys must be strings"),
        ({"a": {1, 2}}, "value.a is a set {1, 2}; expected a JSON value"),
        ({"a": b"x"}, "value.a is a bytes b'x'; expected a JSON value"),
    ],
)
def test_canonical_json_refuses_values_without_one_spelling(value, message):
    with _exactly(message):
        canonical_json(value)


def test_sha256_digest_is_the_hash_of_the_canonical_bytes():
    expected = hashlib.sha256(b'{"a":[1,2.5],"b":"\\u00e9"}').hexdigest()
    assert sha256_digest({"b": "é", "a": [1, 2.5]}) == f"sha256:{expected}"


@given(_json_values)
def test_canonical_json_round_trips(value):
    assert json.loads(canonical_json(value)) == value


@given(_json_values)
def test_the_digest_does_not_depend_on_key_insertion_order(value):
    assert sha256_digest(_reinserted(value)) == sha256_digest(value)


@given(st.text())
def test_canonical_text_is_ascii_and_astral_characters_become_surrogate_pairs(text):
    encoded = canonical_json(text)
    assert encoded.isascii()
    assert json.loads(encoded) == text
    for character in set(text):
        if ord(character) > 0xFFFF:
            high, low = divmod(ord(character) - 0x10000, 0x400)
            assert f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}".encode() in encoded


@given(st.floats(allow_nan=False, allow_infinity=False))
def test_canonical_floats_are_python_repr(number):
    assert canonical_json(number) == repr(number).encode()


@given(st.integers())
def test_canonical_integers_stay_integers(number):
    assert canonical_json(number) == str(number).encode()


# request_text


def test_request_text_is_sorted_indented_and_ends_in_a_newline():
    assert request_text({"b": [1], "a": "é"}) == '{\n  "a": "\\u00e9",\n  "b": [\n    1\n  ]\n}\n'


def test_request_text_accepts_exactly_16_mib():
    base = len(request_text({"a": ""}))
    assert len(request_text({"a": "x" * (MAX_REQUEST_BYTES - base)})) == MAX_REQUEST_BYTES


def test_request_text_refuses_more_than_16_mib():
    base = len(request_text({"a": ""}))
    with _exactly(f"request is {MAX_REQUEST_BYTES + 1} bytes long as JSON; the limit is 16777216 bytes (16 MiB)"):
        request_text({"a": "x" * (MAX_REQUEST_BYTES - base + 1)})


def test_request_text_refuses_non_finite_numbers_by_path():
    with _exactly("request.policy.grace is nan; canonical JSON numbers must be finite"):
        request_text({"policy": {"grace": math.nan}})


# Patterns


@pytest.mark.parametrize(
    ("value", "good"),
    [
        ("sha256:" + "0123456789abcdef" * 4, True),
        ("sha256:" + "0123456789ABCDEF" * 4, False),
        ("sha256:" + "a" * 63, False),
        ("sha256:" + "a" * 65, False),
        ("sha256:" + "a" * 64 + "\n", False),
        ("sha512:" + "a" * 64, False),
        ("a" * 64, False),
        (None, False),
    ],
)
def test_is_digest(value, good):
    assert is_digest(value) is good


@pytest.mark.parametrize(
    ("value", "good"),
    [
        ("controller-1", True),
        ("a", True),
        ("9.x_Y-z", True),
        ("a" * 128, True),
        ("a" * 129, False),
        ("", False),
        ("-a", False),
        (".a", False),
        ("_a", False),
        ("a b", False),
        ("a/b", False),
        ("unit-0\n", False),
        ("é", False),
        ("\u0661", False),  # an Arabic-Indic digit is a digit, but not a safe character
        (7, False),
    ],
)
def test_is_safe_id(value, good):
    assert is_safe_id(value) is good


# strict_loads


def test_strict_loads_allows_surrounding_whitespace():
    assert strict_loads(' \n{"a": [1, 2.5]}\r\n ') == {"a": [1, 2.5]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "not JSON (Expecting value at line 1 column 1)"),
        ("{'a': 1}", "not JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
        ('{"a": 1} {"b": 2}', "trailing data after the JSON value at line 1 column 10"),
        ('{"a": 1}\n{"b": 2}', "trailing data after the JSON value at line 2 column 1"),
        ('{"a": 1, "a": 1}', "duplicate key 'a'"),
        ('{"a": {"b": 1, "b": 2}}', "duplicate key 'b'"),
        ('[{"x": 1, "x": 1}]', "duplicate key 'x'"),
        ('{"a": NaN}', "NaN is not a JSON number (numbers must be finite)"),
        ("[-Infinity]", "-Infinity is not a JSON number (numbers must be finite)"),
        ("[1e400]", "the number '1e400' is out of range (numbers must be finite)"),
        ("[" + "7" * 41 + "]", "an integer has 41 digits (the limit is 40)"),
        ("[" * 100_000, "not JSON this parser can read (nested too deeply)"),
    ],
)
def test_strict_loads_refusals(text, message):
    with _exactly(message):
        strict_loads(text)


def test_strict_loads_accepts_40_digit_integers():
    assert strict_loads("-" + "9" * 40) == -int("9" * 40)
