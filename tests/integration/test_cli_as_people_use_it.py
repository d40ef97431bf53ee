"""Issue 10: the CLI as people use it, and recipes that say what they mean. Real CLI processes and workloads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.daemon_harness import ROOT, daemon_environment

pytestmark = pytest.mark.integration

EXAMPLE_RECIPE = ROOT / "examples" / "recipes" / "example-chat.yaml"
PYTHON = sys.executable


def _cli(state: Path, *args: str, cwd: Path = ROOT, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run(
        [PYTHON, "-m", "sparkrun", *args, "--state-dir", str(state)],
        cwd=cwd,
        env=daemon_environment(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _shell(command: str, state: Path) -> subprocess.CompletedProcess:
    env = {**daemon_environment(), "SPARKRUN_STATE_DIR": str(state), "PY": PYTHON}
    return subprocess.run(
        ["bash", "-c", f"set -o pipefail; {command}"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.fixture
def state(tmp_path):
    state_dir = tmp_path / "state"
    yield state_dir
    _cli(state_dir, "stop", "--all")


def test_a_failed_launch_says_why_once(state):
    assert _cli(state, "run", str(EXAMPLE_RECIPE)).returncode == 0
    again = _cli(state, "run", str(EXAMPLE_RECIPE))
    assert again.returncode == 1
    reason = "a deployment with this name is already running"
    assert (again.stdout + again.stderr).count(reason) == 1
    assert again.stdout.splitlines() == ["[1/6] Prepare: started", "[1/6] Prepare: failed"]
    assert again.stderr.startswith(f"error: {reason}")


def test_stop_says_one_line(state):
    assert _cli(state, "run", str(EXAMPLE_RECIPE)).returncode == 0
    assert _cli(state, "run", str(EXAMPLE_RECIPE), "--name", "second").returncode == 0
    one = _cli(state, "stop", "second")
    assert (one.returncode, one.stdout, one.stderr) == (0, "stopped second (terminated)\n", "")
    assert _cli(state, "run", str(EXAMPLE_RECIPE), "--name", "second").returncode == 0
    everything = _cli(state, "stop", "--all")
    assert everything.stdout == "stopped 2 deployments: example-chat (terminated), second (terminated)\n"
    none = _cli(state, "stop", "--all")
    assert none.stdout == "nothing is running\n"


def test_piping_into_head_exits_quietly(state):
    launched = _shell('"$PY" -m sparkrun run examples/recipes/example-chat.yaml --json | head -2', state)
    assert (launched.returncode, launched.stderr) == (141, "")
    assert len(launched.stdout.splitlines()) == 2
    consumer = _shell('"$PY" examples/library_consumer.py --json --no-otel | head -5', state)
    assert (consumer.returncode, consumer.stderr) == (141, "")


def test_a_stopped_deployment_keeps_its_last_log_and_old_logs_are_pruned(state):
    assert _cli(state, "run", str(EXAMPLE_RECIPE)).returncode == 0
    assert _cli(state, "stop", "example-chat").returncode == 0
    kept = _cli(state, "logs", "example-chat")
    assert kept.returncode == 0 and "serving tiny-echo" in kept.stdout
    deployments = state / "deployments"
    now = time.time()
    for index in range(25):  # logs of 25 deployments stopped long ago, oldest first
        old = deployments / f"old-{index:02d}.log"
        old.write_text("bygone\n")
        os.utime(old, (now - 10_000 + index, now - 10_000 + index))
    assert _cli(state, "run", str(EXAMPLE_RECIPE), "--name", "fresh").returncode == 0
    left = sorted(path.name for path in deployments.glob("*.log"))
    assert "fresh.log" in left and "example-chat.log" in left
    # 20 stopped logs stay: example-chat and the 19 newest old ones; the running deployment's does not count
    assert [name for name in left if name.startswith("old-")] == [f"old-{i:02d}.log" for i in range(6, 25)]


# -- recipes say what they mean --------------------------------------------------------------


def _recipe(directory: Path, text: str, file: str = "chat.yaml") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file
    server = ROOT / "examples" / "workloads" / "openai_server.py"
    path.write_text(text.replace("SERVER", str(server)), encoding="utf-8")
    return path


RECIPE = """recipe_version: "1"
name: {name}
runtime: process
command: "{{python}} SERVER --host {{host}} --port {{port}} --model {{model}}"
defaults:
  model: tiny-echo
{extra}
readiness:
  http_path: /health
"""


@pytest.mark.parametrize(
    ("builtin", "where"),
    [
        ("port", "the listening port: the recipe's port field, or --port"),
        ("name", "the deployment name: the recipe's name field, or --name"),
        ("host", "the address the workload binds on its host, which sparkrun fills"),
        ("python", "the Python that runs sparkrun; use a placeholder of your own for another interpreter"),
        ("recipe_dir", "the recipe's folder, which sparkrun fills"),
    ],
)
def test_defaults_naming_a_built_in_are_refused_saying_where_the_value_goes(tmp_path, state, builtin, where):
    path = _recipe(tmp_path / "recipes", RECIPE.format(name="chat", extra=f"  {builtin}: 18777"))
    completed = _cli(state, "run", str(path))
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == (
        f"error: {path}:7: defaults.{builtin} cannot be set: {{{builtin}}} is {where} (field=defaults.{builtin})"
    )


def test_a_set_key_the_command_never_uses_is_refused_with_a_suggestion(tmp_path, state):
    path = _recipe(tmp_path / "recipes", RECIPE.format(name="chat", extra=""))
    completed = _cli(state, "run", str(path), "--set", "modle=big")
    assert completed.returncode == 1
    assert completed.stderr.splitlines()[-1] == (
        f"error: {path}: --set modle matches no placeholder of the command; did you mean 'model'? "
        "(placeholders you can set: model) (field=command)"
    )


def test_a_recipe_is_found_by_its_name_field_too(tmp_path, state):
    project = tmp_path / "project"
    _recipe(project / "recipes", RECIPE.format(name="my-chat", extra=""), file="a-file-name.yaml")
    completed = _cli(state, "run", "my-chat", cwd=project)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines()[-1].startswith("my-chat is running at http://127.0.0.1:")
