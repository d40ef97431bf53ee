"""Quoting values in error messages: short, bounded work, never an error of its own."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sparkrun.core.short_repr import short_repr, shorten


class Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class NamelessMeta(type):
    @property
    def __name__(cls) -> str:  # type: ignore[override]
        raise RuntimeError("no name")


class Nameless(metaclass=NamelessMeta):
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


def test_short_values_are_their_repr():
    for value in ("abc", 42, -1.5, None, True, [1, "a"], (1,), {"a": 1}):
        assert short_repr(value) == repr(value)


def test_long_values_keep_their_head():
    assert short_repr("k" * 1_000_000) == "'" + "k" * 56 + "..."
    assert short_repr(10**400) == "1" + "0" * 56 + "..."
    assert short_repr(10**5000) == "<int of 16610 bits>"


def test_unprintable_values():
    assert short_repr(Unprintable()) == "<unprintable Unprintable>"
    assert short_repr([Unprintable(), 1]) == "[<unprintable Unprintable>, 1]"
    assert short_repr(Nameless()) == "<unprintable value>"


def test_aliased_and_recursive_containers_are_cheap():
    shared: list = ["x"]
    for _ in range(200):  # 2**200 leaves when expanded
        shared = [shared, shared]
    assert short_repr(shared) == "[[[[...], [...]], [[...], [...]]], [[[...], [...]], [[......"
    loop: list = []
    loop.append(loop)
    assert short_repr(loop) == "[[[[...]]]]"


def test_shorten():
    assert shorten("abc", 5) == "abc"
    assert shorten("abcdefgh", 5) == "ab..."


_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(), st.builds(Unprintable)),
    lambda children: st.one_of(st.lists(children), st.tuples(children), st.dictionaries(st.text(), children)),
    max_leaves=30,
)


@given(_values, st.integers(3, 80))
def test_any_value_quotes_within_the_limit(value, limit):
    assert len(short_repr(value, limit)) <= limit
