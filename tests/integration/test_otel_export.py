"""Real OTLP export: to Phoenix over HTTP and gRPC, to a closed port, and under opentelemetry-instrument."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import otel
from otel import SparkrunInstrumentor
from sparkrun.application import initialize
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from tests.conftest import SPEC_TRANSFER

pytestmark = pytest.mark.integration
BIN = Path(sys.executable).parent


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
    return {**env, **extra}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe is closed


def _relay(sctx) -> str:
    with operation_scope(sctx, name="relay") as operation:
        parent = get_feedback("oci-relay")
        receiver = parent.child(host="spark-1")
        receiver.progress("Receiving missing layers", **SPEC_TRANSFER)
        receiver.warning("mirror is slow", stage="transfer")
        receiver.progress("Image verified", stage="verify", status="succeeded")
        parent.error("one host failed", status="failed", metrics={"error_type": "TimeoutError"})
    return operation.operation_id


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_library_export_is_read_back_from_phoenix_by_operation_id(phoenix, tmp_path, protocol):
    endpoint = phoenix.http_endpoint if protocol == "http/protobuf" else phoenix.grpc_endpoint
    telemetry = otel.configure(state_dir=tmp_path, set_global=False, endpoint=endpoint, protocol=protocol)
    SparkrunInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    try:
        operation_id = _relay(initialize(state_dir=tmp_path, events=lambda event: None))
    finally:
        SparkrunInstrumentor().uninstrument()
    assert telemetry.shutdown(timeout=10) is True
    spans = {span["name"]: span for span in phoenix.spans(operation_id, min_count=3)}
    root, receiver = spans["sparkrun.relay"], None
    assert root["context"]["trace_id"] == operation_id and root["parent_id"] is None
    assert root["attributes"]["sparkrun.operation_id"] == operation_id and root["status_code"] == "OK"
    relays = [s for s in phoenix.spans(operation_id, min_count=3) if s["name"] == "oci-relay"]
    (receiver,) = [s for s in relays if s["attributes"].get("host.name") == "spark-1"]
    (parent,) = [s for s in relays if s is not receiver]
    assert receiver["parent_id"] == parent["context"]["span_id"]
    assert parent["parent_id"] == root["context"]["span_id"]
    assert receiver["status_code"] == "OK" and receiver["attributes"]["sparkrun.stage"] == "verify"
    assert parent["status_code"] == "ERROR" and parent["attributes"]["error.type"] == "TimeoutError"
    names = [event["name"] for event in receiver["events"]]
    assert names == ["sparkrun.feedback.progress", "sparkrun.feedback.warning", "sparkrun.feedback.progress"]
    first = receiver["events"][0]["attributes"]
    assert first["sparkrun.total_kind"] == "upper_bound" and first["sparkrun.metric.reused_layers"] == 2


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_cli_exports_to_the_environment_endpoint(phoenix, tmp_path, protocol):
    endpoint = phoenix.http_endpoint if protocol == "http/protobuf" else phoenix.grpc_endpoint
    env = _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, OTEL_EXPORTER_OTLP_PROTOCOL=protocol)
    result = subprocess.run(
        [str(BIN / "sparkrun"), "doctor", "--json", "--state-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (operation_id,) = {json.loads(line)["operation_id"] for line in result.stdout.splitlines()}
    names = sorted(span["name"] for span in phoenix.spans(operation_id, min_count=5))
    assert names == [
        "sparkrun.doctor",
        "sparkrun.doctor",
        "sparkrun.doctor.config",
        "sparkrun.doctor.state_dir",
        "sparkrun.doctor.telemetry",
    ]
    assert not (tmp_path / "traces").exists()  # an endpoint replaces the local store


def test_closed_endpoint_does_not_slow_or_fail_the_operation(tmp_path):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    telemetry = otel.configure(state_dir=tmp_path, set_global=False, endpoint=endpoint, protocol="http/protobuf")
    SparkrunInstrumentor().instrument(tracer_provider=telemetry.tracer_provider)
    sctx = initialize(state_dir=tmp_path, events=lambda event: None)
    try:
        started = time.monotonic()
        for _ in range(20):
            _relay(sctx)
        elapsed = time.monotonic() - started
    finally:
        SparkrunInstrumentor().uninstrument()
    stop_started = time.monotonic()
    delivered = telemetry.shutdown(timeout=1.0)
    stop_elapsed = time.monotonic() - stop_started
    assert elapsed < 5  # 20 operations; the exporter's retries (up to its 10 s timeout) happen elsewhere
    assert stop_elapsed < 3 and delivered is False


@pytest.mark.parametrize("quiet", [[], ["-q"]])
def test_a_collector_that_is_down_costs_one_line_naming_it(tmp_path, quiet):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = _clean_env(OTEL_EXPORTER_OTLP_ENDPOINT=endpoint, SPARKRUN_OTEL_SHUTDOWN_TIMEOUT="1")
    result = subprocess.run(
        [str(BIN / "sparkrun"), "doctor", "--state-dir", str(tmp_path), *quiet],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1  # the telemetry check itself reports the refused connection
    assert f"telemetry  failed  cannot reach the OTLP endpoint {endpoint} (Connection refused)" in result.stdout
    (warning,) = result.stderr.splitlines()
    assert warning.startswith(f"warning: traces were not delivered to otlp http/protobuf {endpoint} (")


def test_opentelemetry_instrument_enables_the_instrumentor(tmp_path):
    result = subprocess.run(
        [
            str(BIN / "opentelemetry-instrument"),
            str(BIN / "sparkrun"),
            "doctor",
            "--json",
            "--state-dir",
            str(tmp_path),
        ],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    (operation_id,) = {json.loads(line)["operation_id"] for line in result.stdout.splitlines()}
    assert (tmp_path / "traces" / f"{operation_id}.jsonl").is_file()


def test_configure_installs_global_providers_that_instrument_picks_up(tmp_path):
    code = (
        "import otel\n"
        "from sparkrun.application import initialize\n"
        "from sparkrun.core.operation import operation_scope\n"
        "from sparkrun.feedback import get_feedback\n"
        f"telemetry = otel.configure(state_dir={str(tmp_path)!r})\n"
        "otel.SparkrunInstrumentor().instrument()\n"
        f"with operation_scope(initialize(state_dir={str(tmp_path)!r}), name='global') as operation:\n"
        "    get_feedback('probe').progress('hello', status='succeeded')\n"
        "assert telemetry.shutdown()\n"
        "print(operation.operation_id)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    operation_id = result.stdout.strip()
    assert operation_id in (tmp_path / "traces" / f"{operation_id}.jsonl").read_text()
