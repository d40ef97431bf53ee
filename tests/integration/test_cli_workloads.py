"""`sparkrun run|status|logs|stop` end to end: the console script, real workloads, loopback HTTP."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest

from sparkrun.core.processes import start_ticks

ROOT = Path(__file__).resolve().parents[2]
SPARKRUN = Path(sys.executable).with_name("sparkrun")
EXAMPLE_RECIPE = ROOT / "examples" / "recipes" / "example-chat.yaml"
SERVER = ROOT / "examples" / "workloads" / "openai_server.py"
TIMEOUT = 60
RUNNING = re.compile(r"^(\S+) is running at (http://127\.0\.0\.1:\d+) \(pid (\d+)\); operation ([0-9a-f]{32})$", re.M)
pytestmark = pytest.mark.integration


def _environment() -> dict[str, str]:
    """The test's environment without telemetry or sparkrun settings of the developer's shell."""
    return {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "SPARKRUN_"))}


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Background:
    """A CLI process in the background; threads collect its output so a test can wait for a line."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._drain, args=(process.stdout, self.stdout), daemon=True),
            threading.Thread(target=self._drain, args=(process.stderr, self.stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _drain(stream: IO[str], into: list[str]) -> None:
        for line in stream:
            into.append(line.rstrip("\n"))

    def finish(self, timeout: float = TIMEOUT) -> int:
        """Wait for the process to exit and its output to be read; returns the exit code."""
        code = self.process.wait(timeout=timeout)
        for reader in self._readers:
            reader.join(timeout=timeout)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return code


class Sparkrun:
    """Runs the console script against one state directory; remembers background processes."""

    def __init__(self, state_dir: Path, cwd: Path) -> None:
        self.state_dir = state_dir
        self.cwd = cwd
        self.env = _environment()
        self.background: list[Background] = []

    def argv(self, *args: str) -> list[str]:
        return [str(SPARKRUN), *args, "--state-dir", str(self.state_dir)]

    def __call__(self, *args: str, cwd: Path | None = None, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(*args), capture_output=True, text=True, timeout=timeout, env=self.env, cwd=cwd or self.cwd
        )

    def popen(self, *args: str) -> Background:
        process = subprocess.Popen(
            self.argv(*args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=self.cwd,
            # Ctrl+C must reach it even when the test run itself was started with SIGINT ignored (`cmd &`).
            preexec_fn=_default_sigint,
        )
        background = Background(process)
        self.background.append(background)
        return background

    def run_example(self, *extra: str) -> tuple[subprocess.CompletedProcess, re.Match[str]]:
        """Launch the repository's example recipe detached; returns the result and its "is running" line."""
        result = self("run", str(EXAMPLE_RECIPE), *extra)
        assert result.returncode == 0, result.stderr
        running = RUNNING.search(result.stdout)
        assert running is not None, result.stdout
        return result, running


@pytest.fixture
def project(tmp_path) -> Path:
    """A working directory with ``recipes/example-chat.yaml`` that runs the example server by absolute path."""
    recipes = tmp_path / "project" / "recipes"
    recipes.mkdir(parents=True)
    text = EXAMPLE_RECIPE.read_text(encoding="utf-8")
    relative = "{recipe_dir}/../workloads/openai_server.py"
    assert relative in text
    (recipes / "example-chat.yaml").write_text(text.replace(relative, shlex.quote(str(SERVER))), encoding="utf-8")
    return recipes.parent.resolve()


@pytest.fixture
def sparkrun(tmp_path, project) -> Iterator[Sparkrun]:
    """The CLI with a fresh state directory; every workload it launched is stopped afterwards."""
    runner = Sparkrun(tmp_path / "state", project)
    try:
        yield runner
    finally:
        for background in runner.background:
            if background.process.poll() is None:
                background.process.kill()
            background.finish()
        stopped = runner("stop", "--all")
        assert stopped.returncode == 0, stopped.stderr


def _chat(url: str, content: str) -> dict[str, Any]:
    body = json.dumps({"model": "tiny-echo", "messages": [{"role": "user", "content": content}]}).encode()
    request = urllib.request.Request(
        f"{url}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _wait_for(lines: list[str], pattern: str, timeout: float = 30.0) -> re.Match[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in list(lines):
            match = re.search(pattern, line)
            if match:
                return match
        time.sleep(0.05)
    raise AssertionError(f"no line matching {pattern!r} within {timeout} s: {lines}")


# -- the main flow ---------------------------------------------------------------------


def test_run_status_chat_logs_stop(sparkrun):
    result = sparkrun("run", "example-chat")  # by name, from ./recipes
    assert result.returncode == 0, result.stderr
    stdout = result.stdout
    for phase in range(1, 7):
        assert re.search(rf"^\[{phase}/6\] ", stdout, re.M), stdout
    assert "[2/6] Build: skipped (the process runtime has nothing to build)" in stdout.splitlines()
    assert "[3/6] Distribute: skipped (model tiny-echo is not a directory (the workload resolves it))" in stdout
    running = RUNNING.search(stdout)
    assert running is not None, stdout
    name, url, pid = running.group(1), running.group(2), int(running.group(3))
    assert name == "example-chat"
    assert stdout.rstrip("\n").splitlines()[-1] == running.group(0)

    status = sparkrun("status")
    assert status.returncode == 0, status.stderr
    header, row = status.stdout.splitlines()
    assert header.split() == ["name", "host", "state", "pid", "url", "started", "recipe"]
    assert row.split()[:5] == ["example-chat", "localhost", "running", str(pid), url]

    as_json = sparkrun("status", "--json")
    assert as_json.returncode == 0, as_json.stderr
    (deployment,) = json.loads(as_json.stdout)
    assert deployment["name"] == "example-chat" and deployment["state"] == "running"
    assert deployment["url"] == url and deployment["pids"] == [pid] and deployment["hosts"] == ["localhost"]
    assert deployment["operation_id"] == running.group(4)
    log_path = Path(deployment["log_path"])
    assert log_path == sparkrun.state_dir / "deployments" / "example-chat.log"

    reply = _chat(url, "hello there world")
    assert reply["choices"][0]["message"]["content"] == "echo: world there hello"

    logs = sparkrun("logs", "example-chat", "--tail", "2")
    assert logs.returncode == 0, logs.stderr
    last_two = log_path.read_text(encoding="utf-8").splitlines()[-2:]
    assert logs.stdout.splitlines() == last_two
    assert last_two[-1] == "POST /v1/chat/completions 200"

    stopped = sparkrun("stop", "example-chat")
    assert stopped.returncode == 0, stopped.stderr
    assert stopped.stdout.splitlines()[-1] == "stopped example-chat (terminated)"
    assert start_ticks(pid) is None

    after = sparkrun("status")
    assert after.returncode == 0 and after.stdout.strip() == "no deployments"


def test_run_json_prints_events_then_the_result(sparkrun):
    result = sparkrun("run", str(EXAMPLE_RECIPE), "--json")
    assert result.returncode == 0, result.stderr
    *events, last = [json.loads(line) for line in result.stdout.splitlines()]
    assert last["type"] == "result"
    assert last["name"] == "example-chat" and last["state"] == "running"
    assert last["url"] == f"http://127.0.0.1:{last['port']}"
    assert {event["operation_id"] for event in events} == {last["operation_id"]}
    phases = [event["phase"] for event in events if event["type"] == "progress"]
    assert sorted(set(phases)) == [1, 2, 3, 4, 5, 6] and phases == sorted(phases)
    assert any(event["type"] == "feedback" for event in events)


def test_events_jsonl_records_one_operation_and_replays(sparkrun, tmp_path):
    path = tmp_path / "events.jsonl"
    _, running = sparkrun.run_example("--events-jsonl", str(path))
    recorded = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert {event["type"] for event in recorded} >= {"progress", "feedback"}
    assert {event["operation_id"] for event in recorded} == {running.group(4)}

    other = tmp_path / "other-state"
    replayed = subprocess.run(
        [str(SPARKRUN), "trace", "replay", str(path), "--state-dir", str(other)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=sparkrun.env,
    )
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.splitlines() == [f"replayed operation {running.group(4)} -> local store {other / 'traces'}"]


def test_second_run_of_a_running_deployment_is_refused(sparkrun):
    _, running = sparkrun.run_example()
    again = sparkrun("run", str(EXAMPLE_RECIPE))
    assert again.returncode == 1
    assert again.stderr.splitlines() == [
        f"error: a deployment with this name is already running (deployment=example-chat, pid={running.group(3)}); "
        "stop it first with `sparkrun stop example-chat`"
    ]
    assert [d["state"] for d in json.loads(sparkrun("status", "--json").stdout)] == ["running"]


# -- bad input -------------------------------------------------------------------------


def test_set_without_equals_is_a_usage_error(sparkrun):
    result = sparkrun("run", str(EXAMPLE_RECIPE), "--set", "model")
    assert result.returncode == 2
    assert "Invalid value for --set: expected KEY=VALUE, got 'model'" in result.stderr
    assert result.stdout == ""


def test_unknown_recipe_name_suggests_the_close_match(sparkrun, project):
    result = sparkrun("run", "example-chta", cwd=project)
    assert result.returncode == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: unknown recipe (recipe='example-chta', searched {project / 'recipes'}, "
        f"{Path(sparkrun.env['XDG_CONFIG_HOME']) / 'sparkrun' / 'recipes'}); did you mean example-chat?"
    ]
    assert "Traceback" not in result.stderr


def test_stop_of_an_unknown_name_is_an_error(sparkrun):
    result = sparkrun("stop", "nothing-here")
    assert result.returncode == 1
    expected = "error: no deployment with this name (deployment='nothing-here', known: none)"
    assert result.stderr.splitlines() == [expected]


@pytest.mark.parametrize("args", [(), ("example-chat", "--all")])
def test_stop_needs_exactly_one_of_name_or_all(sparkrun, args):
    result = sparkrun("stop", *args)
    assert result.returncode == 1
    assert result.stderr.splitlines() == ["error: give a deployment name or --all (not both)"]


# -- foreground and following ----------------------------------------------------------


def test_foreground_follows_logs_and_ctrl_c_detaches(sparkrun):
    foreground = sparkrun.popen("run", str(EXAMPLE_RECIPE), "--foreground")
    running = _wait_for(foreground.stdout, RUNNING.pattern)
    _chat(running.group(2), "are you there")
    _wait_for(foreground.stdout, r"^POST /v1/chat/completions 200$")  # the workload's log, followed live

    foreground.process.send_signal(signal.SIGINT)
    assert foreground.finish() == 0
    assert "detached: example-chat keeps running; stop it with `sparkrun stop example-chat`" in foreground.stderr

    status = sparkrun("status", "--json")
    (deployment,) = json.loads(status.stdout)
    assert deployment["state"] == "running" and deployment["pids"] == [int(running.group(3))]


def test_logs_follow_ends_after_stop(sparkrun):
    sparkrun.run_example()
    follower = sparkrun.popen("logs", "example-chat", "-f")
    _wait_for(follower.stdout, r"^serving tiny-echo on http://127\.0\.0\.1:\d+$")
    assert follower.process.poll() is None  # still following

    stopped = sparkrun("stop", "example-chat")
    assert stopped.returncode == 0, stopped.stderr
    assert follower.finish(timeout=30) == 0
    # A sparkrun that passes TRACEPARENT gets the workload's "trace parent: ..." line first.
    workload_lines = [line for line in follower.stdout if not line.startswith("trace parent: ")]
    assert workload_lines[0].startswith("loading model tiny-echo")


# -- regressions: bugs found while writing these tests -------------------------------


def test_recipe_in_the_config_dir_is_found_without_a_config_file(sparkrun, project, tmp_path):
    config_recipes = Path(sparkrun.env["XDG_CONFIG_HOME"]) / "sparkrun" / "recipes"
    config_recipes.mkdir(parents=True)
    (project / "recipes" / "example-chat.yaml").rename(config_recipes / "example-chat.yaml")
    result = sparkrun("run", "example-chat")
    assert result.returncode == 0, result.stderr
    assert RUNNING.search(result.stdout) is not None


def test_ctrl_c_during_readiness_leaves_no_unrecorded_workload(sparkrun):
    launching = sparkrun.popen("run", str(EXAMPLE_RECIPE), "--set", "startup_delay=20")
    started = _wait_for(launching.stdout, r"Started example-chat \(pid (\d+)\)")
    pid = int(started.group(1))
    ticks = start_ticks(pid)
    try:
        _wait_for(launching.stdout, r"waiting for port \d+")
        launching.process.send_signal(signal.SIGINT)
        assert launching.finish() == 130
        # One line says what happened and what was cleaned up; nothing else is printed after Ctrl+C.
        assert launching.stderr == ["error: interrupted; the launch was undone: nothing it started is left running"]
        assert not [line for line in launching.stdout if "failed" in line or "Interrupt" in line]
        recorded = json.loads(sparkrun("status", "--json").stdout)
        assert (start_ticks(pid) == ticks) == any(pid in deployment["pids"] for deployment in recorded)
        assert start_ticks(pid) != ticks  # and the workload it had started is gone
    finally:
        if start_ticks(pid) == ticks:
            os.killpg(pid, signal.SIGKILL)
