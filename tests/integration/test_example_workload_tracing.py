"""The example workload in the trace of the operation that launched it, run as a real process.

With ``TRACEPARENT`` and an OTLP endpoint, each request is a SERVER span under the launching span, read
back from a real Phoenix. Without an endpoint nothing of OpenTelemetry is imported; with one but no SDK
(the host's bare ``python3``) the server says so once and serves as usual.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping

import pytest

from tests.integration.example_workload_harness import MODEL, SERVER, ServerProcess, call
from tests.integration.otlp_capture import OTLPCapture

pytestmark = pytest.mark.integration

TRACE_ID = "5c0a9b4e6d1f42b8a37e90c1d2f3a4b5"
PARENT_ID = "a1b2c3d4e5f60718"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
BARE_PYTHON = "/usr/bin/python3"

# Runs the real server in-process and, at exit, reports which opentelemetry modules were ever imported.
_PROBE = f"""
import atexit, json, runpy, sys
def report():
    loaded = sorted(name for name in sys.modules if name.split(".")[0] == "opentelemetry")
    print("otel modules: " + json.dumps(loaded), file=sys.stderr, flush=True)
atexit.register(report)
sys.path.insert(0, {str(SERVER.parent)!r})
sys.argv[0] = {str(SERVER)!r}
runpy.run_path({str(SERVER)!r}, run_name="__main__")
"""


def _environ(**settings: str) -> dict[str, str]:
    """This environment without any tracing or OTel settings of the test runner's, plus ``settings``."""
    drop = ("OTEL_", "TRACEPARENT", "TRACESTATE", "PYTHONPATH")
    env = {name: value for name, value in os.environ.items() if not name.startswith(drop)}
    return {**env, **settings}


def _chat(**overrides: object) -> dict[str, object]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "the quick brown fox"}], **overrides}


def _terminate(process: ServerProcess) -> None:
    """SIGTERM, as ``sparkrun stop`` sends it; the server must exit 0 and flush what it exports."""
    process.proc.send_signal(signal.SIGTERM)
    assert process.proc.wait(timeout=30) == 0, process.stderr
    process.stop()  # joins the output readers


@pytest.fixture
def start_server() -> Iterator[Callable[..., ServerProcess]]:
    """Starts servers with a given interpreter or wrapper and environment; always kills them."""
    started: list[ServerProcess] = []

    def start(*, launcher: list[str] | None = None, env: Mapping[str, str]) -> ServerProcess:
        started.append(ServerProcess(launcher=launcher, env=env))
        started[-1].wait_ready()
        return started[-1]

    try:
        yield start
    finally:
        for process in started:
            process.stop()


@pytest.fixture(scope="module")
def bare_python() -> str:
    """The host's own python3, with no OpenTelemetry: what a remote host runs the workload with."""
    if shutil.which(BARE_PYTHON) is None:
        pytest.fail(f"{BARE_PYTHON} is needed to run the workload as remote hosts do")
    probe = subprocess.run([BARE_PYTHON, "-c", "import opentelemetry"], capture_output=True, check=False)
    assert probe.returncode != 0, f"{BARE_PYTHON} has opentelemetry; these tests need one without it"
    return BARE_PYTHON


def _otel_modules(process: ServerProcess) -> list[str]:
    (line,) = [line for line in process.stderr if line.startswith("otel modules: ")]
    return json.loads(line.removeprefix("otel modules: "))


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"},
        {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces", "OTEL_TRACES_EXPORTER": "none"},
    ],
    ids=["no-endpoint", "sdk-disabled", "exporter-none"],
)
def test_without_export_no_opentelemetry_module_is_imported(start_server, settings):
    process = start_server(launcher=[sys.executable, "-c", _PROBE], env=_environ(TRACEPARENT=TRACEPARENT, **settings))
    status, _, body = call(process.url + "/v1/chat/completions", "POST", _chat())
    assert status == 200 and json.loads(body)["usage"]["completion_tokens"] == 5
    _terminate(process)
    assert _otel_modules(process) == []
    assert [line for line in process.stderr if not line.startswith("otel modules: ")] == [
        f"trace parent: {TRACEPARENT}"
    ]


def test_the_probe_sees_the_sdk_when_an_endpoint_is_configured(start_server):
    """The control for the test above: the same probe does see the imports when export is on."""
    env = _environ(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9", OTEL_TRACES_SAMPLER="always_off")
    process = start_server(launcher=[sys.executable, "-c", _PROBE], env=env)
    _terminate(process)
    modules = _otel_modules(process)
    assert "opentelemetry.sdk.trace" in modules
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in modules
    assert process.stderr[0] == "traces: exporting request spans to http://127.0.0.1:9/v1/traces over http/protobuf"


def test_bare_python3_logs_the_trace_parent_and_serves(start_server, bare_python):
    process = start_server(launcher=[bare_python, str(SERVER)], env=_environ(TRACEPARENT=f" {TRACEPARENT}\t"))
    assert call(process.url + "/v1/chat/completions", "POST", _chat())[0] == 200
    _terminate(process)
    assert process.stderr == [f"trace parent: {TRACEPARENT}"]


def test_bare_python3_with_an_endpoint_says_once_that_it_exports_nothing_and_serves(start_server, bare_python):
    env = _environ(TRACEPARENT=TRACEPARENT, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    process = start_server(launcher=[bare_python, str(SERVER)], env=env)
    status, _, body = call(process.url + "/v1/chat/completions", "POST", _chat())
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == "echo: fox brown quick the"
    assert call(process.url + "/v1/chat/completions", "POST", b"{not json")[0] == 400
    _terminate(process)
    assert process.stderr[0] == f"trace parent: {TRACEPARENT}"
    (warning,) = process.stderr[1:]
    assert warning.startswith(f"traces: not exported: the OpenTelemetry SDK is not importable by {bare_python} (")
    assert warning.endswith("; serving without tracing")
    assert "No module named 'opentelemetry" in warning


@pytest.mark.parametrize(
    "traceparent",
    ["garbage", f"00-{'0' * 32}-{PARENT_ID}-01", f"00-{TRACE_ID}-{'0' * 16}-01", f"00-{TRACE_ID}-{PARENT_ID}-01-x"],
)
def test_a_malformed_traceparent_is_ignored_and_the_server_serves(start_server, bare_python, traceparent):
    process = start_server(launcher=[bare_python, str(SERVER)], env=_environ(TRACEPARENT=traceparent))
    assert call(process.url + "/v1/chat/completions", "POST", _chat())[0] == 200
    _terminate(process)
    assert process.stderr == [f"trace parent: ignored, TRACEPARENT is not a W3C traceparent: {traceparent!r}"]


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_request_spans_sit_under_the_launch_span_in_phoenix(start_server, phoenix, protocol):
    trace_id = f"{TRACE_ID[:-4]}{'a1b2' if protocol == 'grpc' else 'c3d4'}"  # one trace per protocol
    endpoint = phoenix.grpc_endpoint if protocol == "grpc" else phoenix.http_endpoint
    env = _environ(
        TRACEPARENT=f"00-{trace_id}-{PARENT_ID}-01",
        TRACESTATE="sparkrun=test",
        OTEL_EXPORTER_OTLP_ENDPOINT=endpoint,  # the HTTP exporter appends /v1/traces to this base URL
        OTEL_EXPORTER_OTLP_PROTOCOL=protocol,
        OTEL_BSP_SCHEDULE_DELAY="600000",  # nothing leaves before SIGTERM: the spans prove the final flush
    )
    process = start_server(env=env)
    status, _, body = call(process.url + "/v1/chat/completions", "POST", _chat())
    assert status == 200
    assert json.loads(body)["usage"] == {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    stream = _chat(stream=True, stream_options={"include_usage": True}, max_tokens=2)
    assert call(process.url + "/v1/chat/completions", "POST", stream)[0] == 200
    status, _, body = call(process.url + "/v1/chat/completions", "POST", _chat(model="other-model"))
    assert status == 404
    assert call(process.url + "/v1/nowhere", "GET")[0] == 404
    _terminate(process)

    spans = phoenix.spans(trace_id, min_count=5)  # and at least one /health poll of wait_ready
    assert {span["context"]["trace_id"] for span in spans} == {trace_id}
    assert {span["parent_id"] for span in spans} == {PARENT_ID}
    by_name: dict[str, list[dict]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    assert set(by_name) == {"GET /health", "POST /v1/chat/completions", "GET"}

    chats = by_name["POST /v1/chat/completions"]
    done = sorted((s for s in chats if s["status_code"] != "ERROR"), key=lambda s: s["start_time"])
    plain, streamed = (span["attributes"] for span in done)
    assert plain["gen_ai.usage.input_tokens"] == 4 and plain["gen_ai.usage.output_tokens"] == 5
    assert streamed["gen_ai.usage.input_tokens"] == 4 and streamed["gen_ai.usage.output_tokens"] == 2
    for attributes in (plain, streamed):
        assert attributes["http.request.method"] == "POST"
        assert attributes["http.route"] == "/v1/chat/completions"
        assert attributes["http.response.status_code"] == 200
        assert attributes["gen_ai.request.model"] == attributes["gen_ai.response.model"] == MODEL

    (refused,) = [s for s in chats if s["status_code"] == "ERROR"]
    assert refused["status_message"] == f"The model 'other-model' does not exist; this server serves '{MODEL}'."
    assert refused["attributes"]["http.response.status_code"] == 404
    assert refused["attributes"]["error.type"] == "404"
    assert "gen_ai.usage.input_tokens" not in refused["attributes"]

    (unrouted,) = by_name["GET"]
    assert unrouted["status_code"] == "ERROR" and unrouted["attributes"]["url.path"] == "/v1/nowhere"
    assert "http.route" not in unrouted["attributes"]
    assert all(span["status_code"] != "ERROR" for span in by_name["GET /health"])


@pytest.mark.parametrize(
    ("settings", "service"),
    [({}, "example-openai-server"), ({"OTEL_SERVICE_NAME": "chat-on-spark-1"}, "chat-on-spark-1")],
)
def test_spans_are_server_spans_of_the_service_with_the_callers_tracestate(start_server, settings, service):
    """What Phoenix's REST API does not show: the OTLP span kind, the resource and the trace state."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.trace.v1.trace_pb2 import Span

    with OTLPCapture() as capture:
        env = _environ(
            TRACEPARENT=TRACEPARENT,
            TRACESTATE="sparkrun=op1,other=x",
            OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=capture.endpoint + "/v1/traces",  # used as given
            **settings,
        )
        process = start_server(env=env)
        assert call(process.url + "/v1/chat/completions", "POST", _chat())[0] == 200
        _terminate(process)
    exports = [body for path, body in capture.bodies if path == "/v1/traces"]
    assert exports, capture.bodies
    for body in exports:
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
            assert resource["service.name"] == service
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    assert span.kind == Span.SPAN_KIND_SERVER
                    assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == PARENT_ID
                    assert span.trace_state == "sparkrun=op1,other=x"
    assert "POST /v1/chat/completions" in [span.name for span in capture.spans()]


def test_an_unreachable_endpoint_does_not_get_the_server_killed_on_stop(start_server):
    """The final export gives up in time for ``sparkrun stop``'s default 5 s grace; the exit stays clean."""
    with socket.socket() as hole:  # connections wait in the backlog and are never answered
        hole.bind(("127.0.0.1", 0))
        hole.listen(8)
        env = _environ(TRACEPARENT=TRACEPARENT, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{hole.getsockname()[1]}")
        process = start_server(env=env)
        assert call(process.url + "/v1/chat/completions", "POST", _chat())[0] == 200
        process.proc.send_signal(signal.SIGTERM)
        assert process.proc.wait(timeout=5) == 0
        process.stop()
    assert process.stdout[-1] == "shutting down"
