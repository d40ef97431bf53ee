"""Strict decoding of foreign JSON and printable foreign text."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkrun.benchmarking.foreign_input import ForeignJSONError, loads, printable


@pytest.mark.parametrize(
    ("text", "limit", "shown"),
    [
        ("plain text", 512, "plain text"),
        ("a\x1b[2Jb", 512, "a\ufffd[2Jb"),
        ("tab\there\nnewline", 512, "tab\ufffdhere\ufffdnewline"),
        ("rtl \u202eoverride \u200bzero-width", 512, "rtl \ufffdoverride \ufffdzero-width"),
        ("lone \ud800 surrogate", 512, "lone \ufffd surrogate"),
        ("x" * 600, 512, "x" * 509 + "..."),
        ("abcdef", 2, "ab"),
    ],
)
def test_printable_replaces_what_a_terminal_would_act_on_and_cuts(text, limit, shown):
    assert printable(text, limit) == shown


@given(st.text(st.characters(codec=None, exclude_categories=())), st.integers(0, 600))
def test_printable_is_always_printable_and_bounded(text, limit):
    shown = printable(text, limit)
    assert shown.isprintable() and len(shown) <= limit


def test_loads_keeps_what_json_means():
    assert loads('{"a": [1, 2.5, "x", null, true], "b": {"c": -3}}') == {"a": [1, 2.5, "x", None, True], "b": {"c": -3}}
    assert loads('"\\ud800"') == "\ud800"  # lone surrogates decode; showing them is printable()'s job
    assert math.isnan(loads("NaN")) and loads("1e400") == math.inf  # refused by the fields that use numbers


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": {"b": 1, "b": 2}}', "the key 'b' appears twice in one object"),
        ('{"\\u001b[2J": 1, "\\u001b[2J": 2}', "the key '\ufffd[2J' appears twice in one object"),
        ("-" + "9" * 21, "an integer has 21 digits (limit 20)"),
        ("9" * 20, None),
        ("[" * 50_000, "nested too deeply to decode"),
        ("{", "not valid JSON: Expecting property name enclosed in double quotes at character 1"),
        ("", "not valid JSON: Expecting value at character 0"),
    ],
)
def test_loads_refuses_what_readers_could_disagree_on(text, message):
    if message is None:
        assert loads(text) == int(text)
        return
    with pytest.raises(ForeignJSONError) as caught:
        loads(text)
    assert str(caught.value) == message
