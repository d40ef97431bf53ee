"""coldsnap.timing_objects: wall time of spans, and the receipt's timing object with errors by path."""

from __future__ import annotations

import copy
import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkrun.plugins.coldsnap.timing import Clock, Span, TimingError, validate_timing
from tests.unit.coldsnap.records import ORIGIN_NS, clock, done, span, timing_of, typical_stream


def _exactly(message: str):
    return pytest.raises(TimingError, match=f"^{re.escape(message)}$")


# Wall time

CLOCK = Clock(id="controller", source="controller", origin_unix_ns=ORIGIN_NS)


def test_the_wall_start_is_the_origin_plus_the_offset_in_exact_nanoseconds():
    started = Span(id="s", name="n", clock="controller", start_offset_seconds=0.5)
    assert started.start_unix_ns(CLOCK) == 1_700_000_000_623_456_789
    assert started.wall_start(CLOCK) == 1_700_000_000.6234567


def test_the_offset_is_rounded_to_the_nearest_nanosecond():
    # 0.1 is 0.1000000000000000055... in binary: 100000000 ns, not 100000001
    assert (
        Span(id="s", name="n", clock="controller", start_offset_seconds=0.1).start_unix_ns(CLOCK) == ORIGIN_NS + 10**8
    )
    assert Span(id="s", name="n", clock="controller", start_offset_seconds=2.4e-9).start_unix_ns(CLOCK) == ORIGIN_NS + 2
    assert Span(id="s", name="n", clock="controller", start_offset_seconds=2.6e-9).start_unix_ns(CLOCK) == ORIGIN_NS + 3


def test_the_wall_start_is_more_precise_than_adding_floats():
    origin = 1_700_000_595_495_266_269
    late = Span(id="s", name="n", clock="c", start_offset_seconds=0.1)
    exact = late.wall_start(Clock(id="c", source="s", origin_unix_ns=origin))
    assert exact == float(Fraction(origin + 100_000_000, 10**9)) == 1_700_000_595.5952663
    assert origin / 1e9 + 0.1 == 1_700_000_595.595266  # the naive sum rounds twice and is 0.3 microseconds off


@given(
    st.integers(min_value=1, max_value=2**62),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
    st.floats(min_value=0, max_value=1e6, allow_nan=False),
)
def test_wall_times_are_the_correctly_rounded_exact_values(origin, offset, duration):
    timed = Span(id="s", name="n", clock="c", start_offset_seconds=offset, duration_seconds=duration)
    own = Clock(id="c", source="s", origin_unix_ns=origin)
    start_ns = origin + round(Fraction(offset) * 10**9)
    assert timed.start_unix_ns(own) == start_ns
    assert timed.wall_start(own) == float(Fraction(start_ns, 10**9))
    assert timed.wall_end(own) == float(Fraction(start_ns + round(Fraction(duration) * 10**9), 10**9))


def test_the_wall_end_is_the_start_plus_the_span_s_own_duration():
    finished = Span(id="s", name="n", clock="controller", start_offset_seconds=0.5, duration_seconds=2.25)
    assert finished.wall_end(CLOCK) == (ORIGIN_NS + 2_750_000_000) / 10**9


def test_a_running_span_has_no_wall_end():
    assert Span(id="s", name="n", clock="controller", start_offset_seconds=0).wall_end(CLOCK) is None


def test_wall_times_refuse_another_span_s_clock():
    other = Clock(id="worker-0", source="worker", origin_unix_ns=ORIGIN_NS)
    with pytest.raises(ValueError, match=r"^span 's' runs on clock 'controller', not on clock 'worker-0'$"):
        Span(id="s", name="n", clock="controller", start_offset_seconds=0).wall_start(other)


# validate_timing


def _timing() -> dict:
    return timing_of(typical_stream())


def test_the_typical_timing_is_valid():
    clocks, spans = validate_timing(_timing())
    assert list(clocks) == ["controller", "worker-0"]
    assert [item.id for item in spans] == ["worker-0-1", "adapter-1", "controller-1"]
    assert spans[0].attributes["unit"] == "unit-0" and spans[2].duration_seconds == 4.0


def test_children_may_be_listed_before_their_parents():
    timing = _timing()
    timing["spans"].reverse()
    assert [item.id for item in validate_timing(timing)[1]] == ["controller-1", "adapter-1", "worker-0-1"]


def _broken(change) -> dict:
    timing = copy.deepcopy(_timing())
    change(timing)
    return timing


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.update(format=2), "timing.format is 2; expected 1"),
        (lambda t: t.update(format=True), "timing.format is True; expected 1"),
        (lambda t: t.update(extra=1), "timing has an unknown key 'extra'; the keys are clocks, format, spans"),
        (lambda t: t.pop("spans"), "timing has no 'spans'; it is required"),
        (lambda t: t.update(clocks={}), "timing.clocks must be an array, not object {}"),
        (lambda t: t.update(clocks=[]), "timing.clocks has 0 entries; it must have 1 to 128"),
        (
            lambda t: t.update(clocks=[clock(f"c{i}") for i in range(129)]),
            "timing.clocks has 129 entries; it must have 1 to 128",
        ),
        (lambda t: t.update(spans=[]), "timing.spans has 0 entries; it must have 1 to 2048"),
        (
            lambda t: t.update(spans=[done(span(f"s-{i}")) for i in range(2049)]),
            "timing.spans has 2049 entries; it must have 1 to 2048",
        ),
        (
            lambda t: t["clocks"][1].update(source="s" * 65),
            "timing.clocks[1].source is 65 characters long; the limit is 64",
        ),
        (
            lambda t: t["clocks"].append(clock()),
            "timing.clocks[2].id is 'controller'; timing.clocks[0] has the same id",
        ),
        (
            lambda t: t["spans"][1].pop("duration_seconds"),
            "timing.spans[1] has no 'duration_seconds'; it is required",
        ),
        (
            lambda t: t["spans"][2].update(duration_seconds=-1),
            "timing.spans[2].duration_seconds is -1; it must be a finite number of seconds >= 0",
        ),
        (
            lambda t: t["spans"][0].update(status="running"),
            "timing.spans[0].status is 'running'; expected one of ok, error",
        ),
        (
            lambda t: t["spans"][0]["attributes"].update(note="x" * 513),
            "timing.spans[0].attributes['note'] is 513 characters long; the limit is 512",
        ),
        (
            lambda t: t["spans"].append(done(span("worker-0-1"))),
            "timing.spans[3].id is 'worker-0-1'; timing.spans[0] has the same id",
        ),
        (
            lambda t: t["spans"][1].update(clock="worker-9"),
            "timing.spans[1].clock is 'worker-9'; timing.clocks has no clock with that id",
        ),
        (
            lambda t: t["spans"][1].update(parent="ghost"),
            "timing.spans[1].parent is 'ghost'; timing.spans has no span with that id",
        ),
        (
            lambda t: t["spans"][2].update(parent="controller-1"),
            "timing.spans[2].parent is 'controller-1', the span's own id; a span cannot be its own parent",
        ),
        (
            lambda t: t["spans"][2].update(parent="worker-0-1"),
            "timing.spans[0].parent is 'controller-1', which leads back to 'worker-0-1'; parents must form a tree",
        ),
    ],
)
def test_timing_rules_name_the_path(change, message):
    with _exactly(message):
        validate_timing(_broken(change))


def test_timing_must_be_an_object():
    with _exactly("timing must be an object, not array []"):
        validate_timing([])


def test_a_longer_cycle_is_found():
    spans = [done(span("a", parent="c")), done(span("b", parent="a")), done(span("c", parent="b"))]
    with _exactly("timing.spans[0].parent is 'c', which leads back to 'a'; parents must form a tree"):
        validate_timing({"format": 1, "clocks": [clock()], "spans": spans})


def test_a_deep_chain_is_a_tree():
    spans = [done(span("s-0"))] + [done(span(f"s-{i}", parent=f"s-{i - 1}")) for i in range(1, 2048)]
    spans.reverse()
    assert len(validate_timing({"format": 1, "clocks": [clock()], "spans": spans})[1]) == 2048


def test_the_path_prefix_can_be_chosen():
    with _exactly("receipt.timing.format is 3; expected 1"):
        validate_timing({"format": 3, "clocks": [], "spans": []}, "receipt.timing")
