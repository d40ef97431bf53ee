"""ColdSnap through the library API and as a daemon job: the same operation, the same spans, cancel included."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import otel
from otel.ids import OperationIdGenerator
from otel.local_store import TraceStore
from sparkrun import api
from sparkrun.application import initialize
from sparkrun.errors import ColdSnapError
from tests.integration.coldsnap_harness import HOSTS
from tests.integration.daemon_harness import DaemonProcess, journal_rows, wait_for

pytestmark = pytest.mark.integration


def test_the_library_api_runs_an_operation_and_delivers_its_spans(captured_snap):
    snap = captured_snap
    events: list[dict] = []
    sctx = initialize(state_dir=snap.state_dir, events=events.append)
    options = api.ColdSnapOptions("restore", str(snap.recipe), controller=snap.controller())
    result = api.coldsnap(options, sctx=sctx)
    assert result.state == "succeeded" and result.startup and result.spans > 10
    assert all(snap.chat(host) for host in HOSTS)
    assert {e["operation_id"] for e in events} == {result.operation_id}
    (execute,) = [e for e in events if e.get("source") == "coldsnap.restore" and e.get("stage") == "execute"][:1]
    controllers = [e for e in events if e.get("source") == "coldsnap.controller"]
    assert {e["activity_id"] for e in controllers} >= {f"{execute['activity_id']}/controller-1"}  # scoped ids
    with pytest.raises(ColdSnapError, match=r"receipt engine is 'vllm'; the request's launch.engine is 'process'"):
        api.coldsnap(
            api.ColdSnapOptions("status", str(snap.recipe), controller=snap.controller('receipt-field:engine="vllm"')),
            sctx=sctx,
        )
    api.coldsnap(api.ColdSnapOptions("sleep", str(snap.recipe), controller=snap.controller()), sctx=sctx)


def _submit(daemon: DaemonProcess, **arguments: str) -> dict:
    response = daemon.client.post("/v1/jobs", json={"operation": "coldsnap", "arguments": arguments})
    assert response.status_code == 202, response.text
    return response.json()


def _replayed_imported(events: list[dict], operation_id: str) -> set[tuple]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=OperationIdGenerator())
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.replay(events, tracer_provider=provider, name="coldsnap")
    return {
        (s.context.span_id, s.start_time, s.end_time)
        for s in exporter.get_finished_spans()
        if "/" in str(s.attributes.get("sparkrun.activity_id", ""))
    }


def test_a_daemon_job_journals_the_spans_and_its_trace_replays_to_the_same_times(captured_snap, tmp_path):
    snap = captured_snap
    with DaemonProcess(tmp_path / "daemon", otel=True, state_dir=snap.state_dir) as daemon:
        job = _submit(daemon, operation="restore", target=str(snap.recipe), controller=snap.controller())
        done = daemon.wait_state(job["job_id"], timeout=120)
        assert done["state"] == "succeeded", done
        assert done["result"]["startup"] and done["result"]["request_id"] == "snap-restore"
        events = [body for _, body in journal_rows(daemon, job["job_id"])]
        assert any(e.get("source") == "coldsnap.runtime.startup_ttft" for e in events)
        live = {
            (int(s.span_id, 16), s.start_ns, s.end_ns)
            for s in TraceStore.in_state_dir(daemon.state_dir).spans(job["operation_id"])
            if "/" in str(s.attributes.get("sparkrun.activity_id", ""))
        }
        assert live and _replayed_imported(events, job["operation_id"]) == live  # same ids, same real times
        assert all(snap.chat(host) for host in HOSTS)
        slept = daemon.wait_state(
            _submit(daemon, operation="sleep", target=str(snap.recipe), controller=snap.controller())["job_id"]
        )
        assert slept["state"] == "succeeded"


def test_cancelling_a_daemon_job_cancels_its_controller(snap, tmp_path):
    with DaemonProcess(tmp_path / "daemon") as daemon:
        job = _submit(daemon, operation="status", target=str(snap.recipe), controller=snap.controller("hang"))

        def hanging() -> bool:
            return any(body.get("source") == "coldsnap.example.hang" for _, body in journal_rows(daemon, job["job_id"]))

        wait_for(hanging, timeout=60, what="the controller to hang")
        assert daemon.client.post(f"/v1/jobs/{job['job_id']}/cancel").status_code == 200
        done = daemon.wait_state(job["job_id"], timeout=60)
        assert done["state"] == "cancelled"
        messages = [body.get("message", "") for _, body in journal_rows(daemon, job["job_id"])]
        assert any(m.startswith("Cancelling: the controller is cleaning up") for m in messages)
        assert "The controller cleaned up and exited (exit code 143)" in messages
        assert not snap.leftovers()


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"operation": "thaw", "target": "x"}, "argument operation is 'thaw'; it must be one of capture, restore"),
        ({"target": "x"}, "argument operation is required for operation coldsnap"),
        ({"operation": "status", "target": 3}, "argument target must be str, not int"),
    ],
)
def test_bad_coldsnap_job_arguments_are_400_naming_the_argument(daemon, arguments, problem):
    response = daemon.client.post("/v1/jobs", json={"operation": "coldsnap", "arguments": arguments})
    assert response.status_code == 400 and problem in response.text


def test_the_cli_json_result_is_the_api_result(captured_snap):
    done = subprocess.run(
        captured_snap.argv("status", "--json"), env=captured_snap.env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    fields = set(api.ColdSnapResult.__dataclass_fields__)
    assert set(result) == fields | {"type"} and sys.executable  # every field, nothing else
