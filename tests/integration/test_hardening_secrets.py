"""Issue 9, class 1: a secret answered to a prompt never leaves a job, whatever the job does with it.

The ``leak`` operation (tests/integration/daemon_plugins.py) puts the secret in
every place an outcome can travel: feedback messages, stages, hosts, sources,
units and metric keys; plain and exception log records; prints split across
two writes; a child process's output; a later prompt's question; and finally
the outcome, as an exception chained to another one or as a result. Each run
then searches every byte that left the worker: everything under the daemon's
directory (state dir with SQLite and WAL, trace store, worker and daemon
logs), the SSE replay, the job JSON, the prompt texts, ``/metrics``,
``trace show --json`` and, with an OTLP endpoint, what a receiver on loopback
got. Zero occurrences, in any form (raw, JSON-escaped, ``repr``-escaped, or
one line of a multi-line secret).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.daemon_harness import DaemonProcess, wait_for
from tests.integration.otlp_capture import OTLPCapture

pytestmark = pytest.mark.integration

ONE_LINE = "hunter2-Ťoken-42xq"
TWO_LINES = "first-LINE-7qz\nsecond-LINE-9wk"


def _forms(secret: str) -> list[bytes]:
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]}
    forms.update(line for line in secret.splitlines() if len(line) >= 6)
    return sorted(form.encode() for form in forms)


def _files(root: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in root.rglob("*") if path.is_file()}


def _assert_nowhere(secret: str, places: dict[str, bytes]) -> None:
    found = [(place, form) for place, data in places.items() for form in _forms(secret) if form in data]
    assert not found, f"the secret leaked: {found[:5]}"


def _answer(daemon: DaemonProcess, job_id: str, value: object) -> dict:
    def pending() -> list | None:
        return daemon.client.get(f"/v1/jobs/{job_id}/prompts").json()["prompts"] or None

    (prompt,) = wait_for(pending, timeout=60, what="a prompt")
    response = daemon.client.post(f"/v1/jobs/{job_id}/prompts/{prompt['prompt_id']}", json={"answer": value})
    assert response.status_code == 200, response.text
    return prompt


@pytest.mark.parametrize(
    ("secret", "outcome", "export"),
    [
        (ONE_LINE, "error", "local"),
        (TWO_LINES, "error", "otlp"),
        (TWO_LINES, "result", "local"),
        (ONE_LINE, "result", "otlp"),
    ],
    ids=["one-line-error-local-store", "newline-error-otlp", "newline-result-local-store", "one-line-result-otlp"],
)
def test_a_secret_is_nowhere_after_every_leak_scenario(tmp_path, secret, outcome, export):
    with OTLPCapture() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint} if export == "otlp" else {}
        with DaemonProcess(tmp_path / "d", otel=True, env=env) as daemon:
            job_id = daemon.submit("leak", outcome=outcome)["job_id"]
            _answer(daemon, job_id, secret)
            later = _answer(daemon, job_id, True)
            assert later["question"] == "Log in to the registry with token [redacted]?"
            job = daemon.wait_state(job_id, timeout=90)
            places = {
                "job JSON": json.dumps(daemon.job(job_id)).encode(),
                "job list": daemon.client.get("/v1/jobs").content,
                "SSE replay": daemon.client.get(f"/v1/jobs/{job_id}/events", params={"follow": "false"}).content,
                "/metrics": daemon.client.get("/metrics").content,
                "prompt question": later["question"].encode(),
            }
            if export == "local":
                shown = daemon.run_cli("trace", "show", job["operation_id"], "--json")
                assert shown.returncode == 0, shown.stderr
                places["trace show --json"] = shown.stdout.encode()
                spans = json.loads(shown.stdout)["spans"]
            shown_job = daemon.run_cli("daemon", "jobs", "show", job_id)
            places["jobs show"] = shown_job.stdout.encode()
        places.update(_files(tmp_path))  # after the daemon stopped: its log and a checkpointed WAL too
        places["OTLP receiver"] = receiver.raw()
    _assert_nowhere(secret, places)

    # The redacted outcome is still the authoritative one, and the trace still tells what happened.
    if outcome == "error":
        assert job["state"] == "failed"
        assert job["error"] == {"type": "RuntimeError", "message": "login failed with token [redacted]"}
    else:
        assert job["state"] == "succeeded"
        assert job["result"] == {
            "[redacted]": ["[redacted]", {"nested": "value [redacted]"}],
            "note": "done with [redacted]",
        }
    if export == "otlp":
        names = {span.name for span in receiver.spans()}
        assert {"sparkrun.leak", "test.leak", "test.leak.[redacted]"} <= names
        (root,) = [span for span in receiver.spans() if span.name == "sparkrun.leak"]
        if outcome == "error":
            assert root.status.message == "login failed with token [redacted]"
            (exception,) = [event for event in root.events if event.name == "exception"]
            stacktrace = next(a.value.string_value for a in exception.attributes if a.key == "exception.stacktrace")
            assert "RuntimeError: login failed with token [redacted]" in stacktrace
            assert "ValueError: the registry refused [redacted]" in stacktrace
        assert b"/v1/metrics" in b"".join(path.encode() for path, _ in receiver.bodies)
    else:
        (root,) = [span for span in spans if span["name"] == "sparkrun.leak"]
        if outcome == "error":
            assert (root["status"], root["status_message"]) == ("error", "login failed with token [redacted]")


def test_a_secret_in_a_job_that_prints_it_raw_is_redacted_by_the_daemon_line_by_line_and_across_lines(tmp_path):
    """The worker log holds what the job printed, through the daemon's own redaction (the last gate)."""
    with DaemonProcess(tmp_path / "d") as daemon:
        job_id = daemon.submit("leak", outcome="result")["job_id"]
        _answer(daemon, job_id, TWO_LINES)
        _answer(daemon, job_id, True)
        daemon.wait_state(job_id, timeout=90)
    log = (daemon.state_dir / "daemon" / "workers" / f"{job_id}.log").read_text()
    assert "stdout echoes [redacted] and goes on" in log
    assert "child echoes [redacted]" in log
    assert "stderr echoes '[redacted]' and [redacted]" in log
    _assert_nowhere(TWO_LINES, {"worker log": log.encode()})
