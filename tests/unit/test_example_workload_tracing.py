"""The example workload's TRACEPARENT parsing and export settings, loaded from ``examples/workloads``.

The parser must never raise, must follow the W3C rules, and must accept exactly what the OpenTelemetry
propagator accepts, so the ``trace parent:`` line and the exported spans tell the same story.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_PATH = Path(__file__).resolve().parents[2] / "examples" / "workloads" / "example_engine" / "tracing.py"
_spec = importlib.util.spec_from_file_location("example_workload_tracing", _PATH)
assert _spec is not None and _spec.loader is not None
tracing = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = tracing  # dataclasses look their module up while the class is built
_spec.loader.exec_module(tracing)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"
VALID = f"00-{TRACE_ID}-{SPAN_ID}-01"


def _otel_ids(value: str) -> tuple[str, str] | None:
    """The (trace id, span id) OpenTelemetry's own W3C propagator extracts, or None when it rejects the value."""
    context = TraceContextTextMapPropagator().extract({"traceparent": value})
    span_context = trace.get_current_span(context).get_span_context()
    if not span_context.is_valid:
        return None
    return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"


def test_a_valid_traceparent_gives_its_ids_and_sampling_flag():
    parent = tracing.parse_traceparent(VALID)
    assert parent == tracing.TraceParent(VALID, TRACE_ID, SPAN_ID, "01")
    assert parent.sampled
    assert not tracing.parse_traceparent(f"00-{TRACE_ID}-{SPAN_ID}-00").sampled


def test_surrounding_spaces_and_tabs_are_dropped():
    assert tracing.parse_traceparent(f" \t{VALID} ").value == VALID


def test_a_future_version_may_carry_more_fields():
    value = f"01-{TRACE_ID}-{SPAN_ID}-01-what-comes-next"
    assert tracing.parse_traceparent(value).trace_id == TRACE_ID
    assert tracing.parse_traceparent(f"cc-{TRACE_ID}-{SPAN_ID}-03").parent_id == SPAN_ID


@pytest.mark.parametrize(
    "value",
    [
        None,
        "",
        "   ",
        "garbage",
        VALID.upper(),  # hex digits are lowercase
        f"00-{'0' * 32}-{SPAN_ID}-01",  # all-zero trace id
        f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
        f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is forbidden
        f"00-{TRACE_ID}-{SPAN_ID}-01-extra",  # version 00 has exactly four fields
        f"01-{TRACE_ID}-{SPAN_ID}-01extra",  # more fields only after a dash
        f"00-{TRACE_ID[:-1]}-{SPAN_ID}-01",  # 31 hex digits
        f"00-{TRACE_ID}-{SPAN_ID}0-01",  # 17 hex digits
        f"00-{TRACE_ID}-{SPAN_ID}-1",
        f"0-{TRACE_ID}-{SPAN_ID}-01",
        f"00_{TRACE_ID}_{SPAN_ID}_01",
        f"00-{TRACE_ID}-{SPAN_ID}-0g",
        f"00-{TRACE_ID}-{SPAN_ID}-01\n",
        f"01-{TRACE_ID}-{SPAN_ID}-01-{'x' * 600}",  # longer than any propagator reads
    ],
)
def test_a_malformed_traceparent_is_ignored(value):
    assert tracing.parse_traceparent(value) is None


def _hex(length: int) -> st.SearchStrategy[str]:
    """Mostly a well-formed field, sometimes all zeros, uppercase or one digit off."""
    return st.one_of(
        st.text(st.sampled_from("0123456789abcdef"), min_size=length, max_size=length),
        st.just("0" * length),
        st.text(st.sampled_from("0123456789abcdefABCDEFxyz"), min_size=length - 1, max_size=length + 1),
    )


_traceparents = st.builds(
    lambda *parts: "-".join(parts[:4]) + parts[4],
    st.one_of(st.sampled_from(["00", "01", "fe", "ff"]), _hex(2)),
    _hex(32),
    _hex(16),
    _hex(2),
    st.one_of(st.just(""), st.text(max_size=8).map(lambda rest: "-" + rest), st.text(max_size=3)),
)


_lower_hex = st.sampled_from("0123456789abcdef")
_well_formed = st.builds(
    "{}-{}-{}-{}{}".format,
    st.sampled_from(["00", "01", "fe"]),
    st.text(_lower_hex, min_size=32, max_size=32),
    st.text(_lower_hex, min_size=16, max_size=16),
    st.text(_lower_hex, min_size=2, max_size=2),
    st.sampled_from(["", "", "-", "-x"]),
)


@given(st.one_of(_well_formed, _traceparents, st.text(max_size=80)))
def test_the_parser_accepts_exactly_what_the_opentelemetry_propagator_accepts(value):
    parent = tracing.parse_traceparent(value)
    expected = _otel_ids(value)
    if value.endswith("\n") and expected is not None:
        # The propagator's "$" lets one trailing newline through; a newline is no part of a W3C header.
        assert parent is None
        return
    assert (None if parent is None else (parent.trace_id, parent.parent_id)) == expected


@pytest.mark.parametrize(
    ("environ", "notice"),
    [
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
            "traces: not exported: OTEL_EXPORTER_OTLP_PROTOCOL is 'http/json'; expected one of http/protobuf, grpc",
        ),
        (
            {
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "thrift",
            },
            "traces: not exported: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is 'thrift'; expected one of http/protobuf, grpc",
        ),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "console"},
            "traces: not exported: OTEL_TRACES_EXPORTER is 'console'; this server exports only otlp",
        ),
    ],
)
def test_an_unusable_export_setting_gives_one_notice(monkeypatch, environ, notice):
    for name in ("TRACEPARENT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    started = tracing.start_tracing()
    assert started.notices == [notice]
    assert not started.enabled


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "  "},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"},
    ],
)
def test_export_is_silently_off_without_an_endpoint_or_when_switched_off(monkeypatch, environ):
    for name in ("TRACEPARENT", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    started = tracing.start_tracing()
    assert started.notices == []
    assert not started.enabled
    record = tracing.RequestRecord("GET", "/health")
    with started.request(record):
        record.status = 200
    started.shutdown()


def test_a_malformed_traceparent_is_named_once_at_startup(monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setenv("TRACEPARENT", "00-nope")
    assert tracing.start_tracing().notices == ["trace parent: ignored, TRACEPARENT is not a W3C traceparent: '00-nope'"]
