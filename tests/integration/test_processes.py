"""Real processes: the console script, its import cost, the runnable examples."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from sparkrun.schemas import load_schema

ROOT = Path(__file__).resolve().parents[2]
SPARKRUN = Path(sys.executable).with_name("sparkrun")
pytestmark = pytest.mark.integration


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=env, cwd=ROOT, **kwargs)


def test_console_script_version_and_help():
    assert _run(str(SPARKRUN), "--version").stdout.strip().endswith("0.1.0")
    help_run = _run(str(SPARKRUN), "--help")
    assert help_run.returncode == 0 and "Usage: sparkrun" in help_run.stdout


def test_help_does_not_import_heavy_modules():
    code = (
        "import sys; from sparkrun.cli.main import cli\n"
        "try:\n    cli(['--help'], standalone_mode=False)\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('opentelemetry', 'otel', 'uvicorn', 'starlette', 'httpx', 'rich', 'yaml', 'jsonschema')]\n"
        "print(heavy)"
    )
    result = _run(sys.executable, "-c", code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_library_consumer_example_prints_every_event_as_json():
    result = _run(sys.executable, "examples/library_consumer.py", "--json")
    assert result.returncode == 0, result.stderr
    trace = _run(str(SPARKRUN), "trace", "show", "latest", "--json")
    assert trace.returncode == 0, trace.stderr
    lines = result.stdout.strip().splitlines()
    *events, summary, exported = lines
    assert exported.startswith("trace exported to local store ")
    parsed = [json.loads(line) for line in events]
    validator = jsonschema.Draft202012Validator(load_schema("feedback"))
    for event in parsed:
        validator.validate(event)
    operation_id = summary.split()[1].rstrip(":")
    assert summary.endswith("succeeded") and {e["operation_id"] for e in parsed} == {operation_id}
    stages = {(e.get("host"), e.get("stage"), e.get("status")) for e in parsed}
    for host in ("spark-1", "spark-2"):
        assert (host, "verify", "succeeded") in stages
    assert any(e["level"] == "warning" for e in parsed)
    assert any(e.get("total_kind") == "upper_bound" for e in parsed)
    assert json.loads(trace.stdout)["trace_id"] == operation_id
    heartbeats = [e for e in parsed if e["message"] == "Verifying image"]
    assert any(e["metrics"]["elapsed_seconds"] > 0 for e in heartbeats)


def test_producer_example_alone_only_logs():
    result = _run(sys.executable, "examples/producer_plugin.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert "PROGRESS my-plugin: Image relayed" in result.stderr
    assert "WARNING my-plugin: Layer cache is 91% full" in result.stderr


@pytest.mark.parametrize("command", ["--no-otel doctor --json", "--no-otel doctor"])
def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path, command):
    # `| true` closes the pipe at once, so every write sparkrun makes hits a broken pipe.
    script = f"{SPARKRUN} {command} --state-dir {tmp_path} | true; echo done >&2"
    result = _run("sh", "-c", script)
    assert result.stderr.strip() == "done", result.stderr
