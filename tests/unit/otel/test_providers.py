"""otel.configure(): providers from the standard environment."""

from __future__ import annotations

import json
import logging

import pytest
from opentelemetry import trace

import otel
from otel import SparkrunInstrumentor
from otel.local_store import LocalSpanExporter, TraceStore
from otel.span_mapper import SpanMapper
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback


@pytest.fixture(autouse=True)
def _clean_otel_env(monkeypatch):
    for name in list(__import__("os").environ):
        if name.startswith("OTEL_"):
            monkeypatch.delenv(name)


def _exporter_of(telemetry):
    return telemetry.watch.exporter


def test_default_is_the_local_store(tmp_path):
    telemetry = otel.configure(state_dir=tmp_path, set_global=False)
    exporter = _exporter_of(telemetry)
    assert isinstance(exporter, LocalSpanExporter) and exporter.store.directory == tmp_path / "traces"
    assert telemetry.destination == f"local store {tmp_path / 'traces'}"
    assert telemetry.tracer_provider.resource.attributes["service.name"] == "sparkrun"
    telemetry.shutdown()


def test_service_name_and_resource_attributes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_SERVICE_NAME", "lab-runner")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=lab,host.name=spark-0")
    attributes = otel.configure(state_dir=tmp_path, set_global=False).tracer_provider.resource.attributes
    assert attributes["service.name"] == "lab-runner"
    assert attributes["deployment.environment"] == "lab" and attributes["host.name"] == "spark-0"


def test_service_name_in_resource_attributes_is_respected(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes")
    telemetry = otel.configure(state_dir=tmp_path, set_global=False)
    assert telemetry.tracer_provider.resource.attributes["service.name"] == "from-attributes"


@pytest.mark.parametrize(
    ("protocol", "module"),
    [
        (None, "opentelemetry.exporter.otlp.proto.http.trace_exporter"),
        ("http/protobuf", "opentelemetry.exporter.otlp.proto.http.trace_exporter"),
        ("grpc", "opentelemetry.exporter.otlp.proto.grpc.trace_exporter"),
    ],
)
def test_endpoint_selects_an_otlp_exporter(tmp_path, monkeypatch, protocol, module):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    if protocol:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    telemetry = otel.configure(state_dir=tmp_path, set_global=False)
    assert type(_exporter_of(telemetry)).__module__ == module
    assert telemetry.destination == f"otlp {protocol or 'http/protobuf'} http://127.0.0.1:4318"
    telemetry.shutdown(timeout=0.5)


def test_per_signal_endpoint_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:2/v1/traces")
    telemetry = otel.configure(state_dir=tmp_path, set_global=False)
    assert telemetry.destination.endswith("http://127.0.0.1:2/v1/traces")
    assert _exporter_of(telemetry)._endpoint == "http://127.0.0.1:2/v1/traces"


def test_explicit_http_endpoint_gets_the_traces_path(tmp_path):
    telemetry = otel.configure(state_dir=tmp_path, set_global=False, endpoint="http://127.0.0.1:9/")
    assert _exporter_of(telemetry)._endpoint == "http://127.0.0.1:9/v1/traces"


BOTH = "traces and metrics are not exported"
BAD_VALUES = [
    ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", f"expected one of http/protobuf, grpc: {BOTH}"),
    ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "bogus", "expected one of http/protobuf, grpc: traces are not exported"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url", f"expected a URL such as http://collector:4318: {BOTH}"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:port", f"its port is not a number: {BOTH}"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "garbage", f"expected comma-separated name=value pairs: {BOTH}"),
    ("OTEL_EXPORTER_OTLP_TIMEOUT", "abc", f"expected a non-negative number: {BOTH}"),
    ("OTEL_EXPORTER_OTLP_COMPRESSION", "bogus", f"expected one of gzip, deflate, none: {BOTH}"),
    ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent.pem", f"no such file: {BOTH}"),
    ("OTEL_BSP_SCHEDULE_DELAY", "abc", "expected an integer >= 1: traces are not exported"),
    ("OTEL_SPAN_EVENT_COUNT_LIMIT", "-3", "expected an integer >= 0: traces are not exported"),
    ("OTEL_RESOURCE_ATTRIBUTES", "team=a,garbage", f"has 'garbage'; expected comma-separated key=value pairs: {BOTH}"),
]


@pytest.mark.parametrize(("variable", "value", "problem"), BAD_VALUES)
def test_a_bad_otel_value_warns_once_naming_it_and_switches_export_off(
    tmp_path, monkeypatch, caplog, sctx, variable, value, problem
):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv(variable, value)
    with caplog.at_level(logging.WARNING):
        telemetry = otel.configure(state_dir=tmp_path, set_global=False)
        with operation_scope(sctx, name="work", observers=[SpanMapper(telemetry.tracer_provider)]) as operation:
            get_feedback("p").progress("still runs")
        assert telemetry.shutdown(1) is True
    assert operation.outcome == "succeeded"
    assert isinstance(telemetry.tracer_provider, trace.NoOpTracerProvider)
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"telemetry: {variable} ")
    assert warnings[0].endswith(problem)


def test_good_values_raise_no_warning(tmp_path, monkeypatch, caplog):
    for variable, value in (
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20x,x-tenant=a=b"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "2.5"),
        ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=lab,team=infra"),
        ("OTEL_SPAN_EVENT_COUNT_LIMIT", "256"),
    ):
        monkeypatch.setenv(variable, value)
    with caplog.at_level(logging.WARNING):
        telemetry = otel.configure(state_dir=tmp_path, set_global=False)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert not isinstance(telemetry.tracer_provider, trace.NoOpTracerProvider)
    telemetry.shutdown(0.1)


def test_an_explicit_unknown_protocol_is_a_caller_error(tmp_path):
    with pytest.raises(ValueError, match="protocol is 'http/json'; expected one of http/protobuf, grpc"):
        otel.configure(state_dir=tmp_path, set_global=False, endpoint="http://127.0.0.1:9", protocol="http/json")


def test_sdk_disabled_gives_no_op_providers(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    telemetry = otel.configure(state_dir=tmp_path)
    assert isinstance(telemetry.tracer_provider, trace.NoOpTracerProvider) and telemetry.destination == "disabled"
    assert telemetry.shutdown() is True
    assert not (tmp_path / "traces").exists()


def test_local_store_round_trip_in_collector_file_format(tmp_path, sctx):
    telemetry = otel.configure(state_dir=tmp_path, set_global=False)
    SparkrunInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    try:
        with operation_scope(sctx, name="relay") as operation:
            get_feedback("oci-relay").child(host="spark-1").progress(
                "moved", current=5, unit="bytes", status="succeeded"
            )
    finally:
        SparkrunInstrumentor().uninstrument()
    assert telemetry.shutdown() is True
    path = tmp_path / "traces" / f"{operation.operation_id}.jsonl"
    for line in path.read_text().splitlines():
        data = json.loads(line)
        for resource_spans in data["resourceSpans"]:
            assert {"key": "service.name", "value": {"stringValue": "sparkrun"}} in resource_spans["resource"][
                "attributes"
            ]
            for span in (s for scope in resource_spans["scopeSpans"] for s in scope["spans"]):
                assert span["traceId"] == operation.operation_id and len(span["spanId"]) == 16
                assert span["startTimeUnixNano"].isdigit() and span["status"]["code"] in (0, 1, 2)
    spans = TraceStore.in_state_dir(tmp_path).spans(operation.operation_id)
    assert sorted(s.name for s in spans) == ["oci-relay", "oci-relay", "sparkrun.relay"]
    (child,) = [s for s in spans if "host.name" in s.attributes]
    assert child.attributes["host.name"] == "spark-1" and child.status == "ok"
    assert child.events[0]["attributes"]["sparkrun.current"] == 5


def test_store_keeps_the_newest_traces(tmp_path):
    import os

    store = TraceStore(tmp_path, max_traces=3)
    tmp_path.mkdir(exist_ok=True)
    for index in range(5):
        path = store.path_of(f"{index:032x}")
        path.write_text("{}\n")
        os.utime(path, (index, index))
    store._prune()
    assert sorted(p.stem for p in tmp_path.glob("*.jsonl")) == [f"{i:032x}" for i in (2, 3, 4)]


def test_unreadable_lines_are_skipped(tmp_path):
    store = TraceStore(tmp_path)
    store.path_of("a" * 32).write_text("garbage\n")
    assert store.spans("a" * 32) == []


def test_headers_from_the_environment_reach_the_collector(tmp_path, monkeypatch, sctx):
    """A real loopback HTTP server stands in for the Collector and records what arrives."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    received: list[dict[str, str]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            received.append({key.lower(): value for key, value in self.headers.items()})
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{server.server_port}/v1/traces")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=lab,authorization=Bearer%20abc")
        telemetry = otel.configure(state_dir=tmp_path, set_global=False)
        SparkrunInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
        try:
            with operation_scope(sctx, name="headers"):
                get_feedback("probe").progress("hello", status="succeeded")
        finally:
            SparkrunInstrumentor().uninstrument()
        assert telemetry.shutdown(timeout=10) is True
    finally:
        server.shutdown()
    assert received and received[0]["x-tenant"] == "lab" and received[0]["authorization"] == "Bearer abc"
