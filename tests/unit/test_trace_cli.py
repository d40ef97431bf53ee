"""`sparkrun trace` and `sparkrun doctor` through click's runner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sparkrun.cli.main import cli
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from tests.conftest import drain


@pytest.fixture(autouse=True)
def _no_otlp_endpoint(monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)


def _invoke(*args: str, **kwargs):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, **kwargs)


def test_doctor_runs_an_operation_and_stores_its_trace(tmp_path):
    result = _invoke("doctor", "--state-dir", str(tmp_path))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0].split() == ["check", "status", "detail"]
    assert [line.split()[:2] for line in result.output.splitlines()[1:]] == [
        ["state_dir", "ok"],
        ["config", "ok"],
        ["telemetry", "ok"],
    ]
    listed = _invoke("trace", "list", "--state-dir", str(tmp_path))
    assert "sparkrun.doctor" in listed.output and " ok " in listed.output
    shown = _invoke("trace", "show", "latest", "--state-dir", str(tmp_path))
    assert shown.exit_code == 0
    for name in ("sparkrun.doctor.state_dir", "sparkrun.doctor.config", "sparkrun.doctor.telemetry"):
        assert name in shown.output


def test_doctor_json_events_are_envelopes(tmp_path):
    result = _invoke("--no-otel", "doctor", "--json", "--state-dir", str(tmp_path))
    events = [json.loads(line) for line in result.output.splitlines()]
    assert {e["type"] for e in events} == {"feedback"} and len({e["operation_id"] for e in events}) == 1


@pytest.mark.parametrize("how", [["--no-otel"], []])
def test_opting_out_is_one_flag_or_one_variable(tmp_path, monkeypatch, how):
    if not how:
        monkeypatch.setenv("SPARKRUN_OTEL", "0")
    assert _invoke(*how, "doctor", "--state-dir", str(tmp_path)).exit_code == 0
    assert not (tmp_path / "traces").exists()


def test_doctor_reports_a_failed_check(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = _invoke("--no-otel", "doctor", "--state-dir", str(blocker / "state"))
    assert result.exit_code == 1
    state_line = result.output.splitlines()[1]
    assert state_line.startswith("state_dir  failed   ") and state_line.endswith("Not a directory")


def test_show_json_tree(tmp_path):
    _invoke("doctor", "--state-dir", str(tmp_path))
    result = _invoke("trace", "show", "latest", "--json", "--state-dir", str(tmp_path))
    tree = json.loads(result.output)
    (root,) = tree["spans"]
    assert root["name"] == "sparkrun.doctor" and root["status"] == "ok"
    (activity,) = root["children"]
    assert [c["name"] for c in activity["children"]] == [
        "sparkrun.doctor.state_dir",
        "sparkrun.doctor.config",
        "sparkrun.doctor.telemetry",
    ]
    assert activity["last_message"] == "3 of 3 checks passed"


def test_show_rejects_a_malformed_id(tmp_path):
    result = CliRunner().invoke(cli, ["trace", "show", "xyz", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip() == (
        "error: not an operation id (operation_id='xyz', expected 32 hex characters or 'latest')"
    )


def test_show_unknown_id(tmp_path):
    result = CliRunner().invoke(cli, ["trace", "show", "a" * 32, "--state-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.startswith(f"error: no trace for this operation in the local store (operation_id={'a' * 32}")


def test_show_latest_on_an_empty_store(tmp_path):
    result = CliRunner().invoke(cli, ["trace", "show", "latest", "--state-dir", str(tmp_path)])
    assert result.exit_code == 1 and "error: the local trace store is empty" in result.output


def test_list_on_an_empty_store(tmp_path):
    assert _invoke("trace", "list", "--state-dir", str(tmp_path)).output.startswith("no traces in")


def test_replay_into_the_local_store_twice_gives_the_same_ids(tmp_path, sctx):
    with operation_scope(sctx, name="relay") as operation:
        get_feedback("oci-relay").child(host="spark-1").progress("moved", status="succeeded")
    events_file = tmp_path / "events.jsonl"
    events_file.write_text("".join(json.dumps(e) + "\n" for e in drain(sctx.queue)))
    state = tmp_path / "state"
    for _ in range(2):
        result = _invoke("trace", "replay", str(events_file), "--state-dir", str(state))
        assert result.output.startswith(f"replayed operation {operation.operation_id} -> local store")
    tree = json.loads(_invoke("trace", "show", operation.operation_id, "--json", "--state-dir", str(state)).output)
    assert tree["trace_id"] == operation.operation_id
    lines = (state / "traces" / f"{operation.operation_id}.jsonl").read_text().splitlines()
    span_ids = [
        sorted(s["spanId"] for rs in json.loads(line)["resourceSpans"] for sc in rs["scopeSpans"] for s in sc["spans"])
        for line in lines
    ]
    assert len(span_ids) == 2 and span_ids[0] == span_ids[1]
    shown = _invoke("trace", "show", operation.operation_id, "--state-dir", str(state)).output
    assert shown.count("oci-relay") == 2  # each span once, although written twice


def test_doctor_skips_telemetry_when_the_sdk_is_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    result = _invoke("doctor", "--state-dir", str(tmp_path))
    assert result.exit_code == 0 and "telemetry  skipped  telemetry export is off" in result.output
    assert not (tmp_path / "traces").exists()


def test_replay_reports_a_bad_line(tmp_path):
    events_file = tmp_path / "events.jsonl"
    events_file.write_text("{oops\n")
    result = CliRunner().invoke(cli, ["trace", "replay", str(events_file), "--state-dir", str(tmp_path)])
    assert result.exit_code == 1
    assert (
        result.output.strip()
        == f"error: {events_file}:1 is not JSON (Expecting property name enclosed in double quotes, column 2)"
    )


def test_replay_of_an_empty_file(tmp_path):
    events_file = tmp_path / "events.jsonl"
    events_file.write_text("\n")
    result = CliRunner().invoke(cli, ["trace", "replay", str(events_file), "--state-dir", str(tmp_path)])
    assert result.exit_code == 1 and "error: no events to replay" in result.output


def test_negative_shutdown_timeout_is_a_usage_error():
    result = CliRunner().invoke(cli, ["--otel-shutdown-timeout", "-1", "doctor"])
    assert result.exit_code == 2 and "-1.0 is not in the range x>=0" in result.output


def _trace_of(state_dir, name: str, started_at: float) -> str:
    """A stored trace of an operation that started at ``started_at`` (replayed from made-up events)."""
    from sparkrun.cli.telemetry import export_replay
    from sparkrun.core.operation import new_operation_id

    operation_id = new_operation_id()
    event = {
        "type": "feedback",
        "feedback_version": 1,
        "operation_id": operation_id,
        "timestamp": started_at + 0.25,
        "source": "p",
        "message": "m",
        "level": "progress",
        "activity_id": "a",
        "status": "succeeded",
    }
    export_replay(
        [event], state=None, state_dir=state_dir, name=name, started_at=started_at, finished_at=started_at + 1
    )
    return operation_id


def test_trace_list_orders_by_start_time_and_fits_the_terminal(tmp_path, monkeypatch):
    newest = _trace_of(tmp_path, "newest-operation-with-a-long-name", 2_000_000_000.0)
    oldest = _trace_of(tmp_path, "oldest", 1_000_000_000.0)  # written last: its write time must not count
    monkeypatch.setenv("COLUMNS", "100")
    listed = _invoke("trace", "list", "--state-dir", str(tmp_path)).output.splitlines()
    assert listed[0].split() == ["started", "duration", "status", "spans", "operation", "id", "operation"]
    assert newest in listed[1] and oldest in listed[2] and "1.00s" in listed[1]
    assert all(len(line) <= 100 for line in listed)
    assert listed[1].endswith("…") and "sparkrun.newest-ope" in listed[1] and listed[2].endswith("sparkrun.oldest")
    monkeypatch.setenv("COLUMNS", "40")
    narrow = _invoke("trace", "list", "--state-dir", str(tmp_path)).output.splitlines()
    assert all(len(line) <= 40 for line in narrow) and narrow[1].endswith("…")
    shown = _invoke("trace", "show", "latest", "--state-dir", str(tmp_path)).output
    assert shown.startswith(f"trace {newest}") and all(len(line) <= 40 for line in shown.splitlines())
    as_json = json.loads(_invoke("trace", "list", "--json", "--state-dir", str(tmp_path)).output)
    assert [(t["operation_id"], t["operation"], t["duration_seconds"]) for t in as_json] == [
        (newest, "sparkrun.newest-operation-with-a-long-name", 1.0),
        (oldest, "sparkrun.oldest", 1.0),
    ]
