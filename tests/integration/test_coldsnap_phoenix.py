"""A ColdSnap restore exported over OTLP to Phoenix, read back by trace id = operation id.

The controller's span tree must be there at the controller's own start offsets and durations (to the
microsecond), with each host's ``host.name`` and ERROR on a span that failed.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(text: str) -> int:
    """Unix microseconds of one of Phoenix's ISO timestamps, in integers (no float rounding)."""
    return (datetime.fromisoformat(text.replace("Z", "+00:00")) - _EPOCH) // timedelta(microseconds=1)


def _exported(snap, phoenix, operation: str, *modes: str) -> tuple[dict, list[dict]]:
    """Run ``operation`` exporting to Phoenix; its result and every span of its trace."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": phoenix.http_endpoint, "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}
    done = snap.cli(operation, "--json", modes=modes, env=env)
    records = [json.loads(line) for line in done.stdout.splitlines()]
    operation_id = records[0]["operation_id"]
    runs = snap.state_dir / "coldsnap" / "runs" / operation_id
    imported = sum(len(json.loads(receipt.read_text())["timing"]["spans"]) for receipt in runs.glob("*/operation.json"))
    activities = {r["activity_id"] for r in records if r.get("type") == "feedback" and "/" not in r["activity_id"]}
    phases = {r["slug"] for r in records if r.get("type") == "progress"}
    expected = 1 + imported + len(activities) + len(phases)  # the root, the controller's, sparkrun's own
    return records[-1], phoenix.spans(operation_id, min_count=expected, timeout=30)


def test_a_restore_in_phoenix_has_the_controllers_tree_times_and_hosts(captured_snap, phoenix):
    snap = captured_snap
    result, spans = _exported(snap, phoenix, "restore")
    receipt = json.loads(Path(result["receipt_path"]).read_text())
    by_id = {span["context"]["span_id"]: span for span in spans}
    (execute,) = [
        s for s in spans if s["name"] == "coldsnap.restore" and s["attributes"].get("sparkrun.stage") == "execute"
    ]
    prefix = execute["attributes"]["sparkrun.activity_id"] + "/"
    imported = {
        s["attributes"]["sparkrun.activity_id"][len(prefix) :]: s
        for s in spans
        if str(s["attributes"].get("sparkrun.activity_id", "")).startswith(prefix)
    }
    origins = {clock["id"]: clock["origin_unix_ns"] for clock in receipt["timing"]["clocks"]}
    assert set(imported) == {span["id"] for span in receipt["timing"]["spans"]}
    for span in receipt["timing"]["spans"]:
        stored = imported[span["id"]]
        start_us = (origins[span["clock"]] + round(span["start_offset_seconds"] * 1e9)) / 1000
        assert abs(_micros(stored["start_time"]) - start_us) <= 1, span["name"]
        duration_us = _micros(stored["end_time"]) - _micros(stored["start_time"])
        assert abs(duration_us - span["duration_seconds"] * 1e6) <= 2, span["name"]
        parent = by_id[stored["parent_id"]]
        if span.get("parent"):
            assert parent is imported[span["parent"]]
        elif span["name"] == "coldsnap.controller":
            assert parent is execute
        else:
            assert parent["name"] == "coldsnap.controller"
    ttft = [s for s in imported.values() if s["name"] == "coldsnap.runtime.startup_ttft"]
    assert {s["attributes"]["host.name"] for s in ttft} == {"127.0.0.1", "127.0.0.2"}
    assert {s["attributes"]["sparkrun.metric.unit"] for s in ttft} == {"unit-0", "unit-1"}
    assert all(s["status_code"] == "OK" for s in imported.values())
    snap.result("sleep")


def test_a_failed_controller_span_is_error_in_phoenix(snap, phoenix):
    _, spans = _exported(snap, phoenix, "status", "fail-span")
    (failed,) = [s for s in spans if s["name"] == "coldsnap.example.injected_failure"]
    assert failed["status_code"] == "ERROR"
    (root,) = [s for s in spans if s["parent_id"] is None]
    assert root["name"] == "sparkrun.coldsnap" and root["status_code"] == "ERROR"
