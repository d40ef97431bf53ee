"""api.run / stop / status / logs with real workload processes (nothing mocks subprocess)."""

from __future__ import annotations

import json
import os
import signal
import socket
import textwrap
import urllib.request
from pathlib import Path
from queue import SimpleQueue

import jsonschema
import pytest

from sparkrun import api
from sparkrun.application import initialize
from sparkrun.core.deployments import DeploymentStore
from sparkrun.core.distribution import (
    DistributionResult,
    HostOutcome,
    ImagePullRequest,
    register_provider,
    unregister_provider,
)
from sparkrun.errors import DeploymentError, DistributionError, HostError, LaunchError, RecipeError
from sparkrun.schemas import load_schema
from tests.conftest import drain
from tests.integration.daemon_harness import process_alive, wait_for

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "workloads" / "openai_server.py"

CHAT = f"""\
recipe_version: "1"
name: {{name}}
runtime: process
command: "{{{{python}}}} {SERVER} --host {{{{host}}}} --port {{{{port}}}} --model {{{{model}}}}"
defaults:
  model: tiny-echo
readiness:
  http_path: /health
  timeout: 20
"""


@pytest.fixture
def recipes(tmp_path, monkeypatch):
    """``./recipes`` of a fresh working directory, with the chat recipe as ``my-recipe``."""
    directory = tmp_path / "work" / "recipes"
    directory.mkdir(parents=True)
    monkeypatch.chdir(directory.parent)
    (directory / "my-recipe.yaml").write_text(CHAT.format(name="my-recipe"))
    return directory


@pytest.fixture
def context(tmp_path):
    queue: SimpleQueue = SimpleQueue()
    sctx = initialize(state_dir=tmp_path / "state", events=queue.put)
    sctx.queue = queue  # type: ignore[attr-defined]
    yield sctx
    sctx.events = None
    api.stop(all=True, grace=1.0, sctx=sctx)


def _recipe(recipes: Path, name: str, body: str) -> str:
    (recipes / f"{name}.yaml").write_text(textwrap.dedent(body))
    return name


def test_spec_consumer_fragment_runs_verbatim_against_a_recipe_directory(recipes, tmp_path):
    fragment = textwrap.dedent(
        """
        from sparkrun.application import initialize
        from sparkrun import api

        sctx = initialize()
        from queue import SimpleQueue

        event_queue = SimpleQueue()
        sctx.events = event_queue.put
        result = api.run(api.RunOptions(recipe="my-recipe", detached=True), sctx=sctx)
        """
    )
    namespace: dict = {}
    exec(fragment, namespace)
    result, queue, sctx = namespace["result"], namespace["event_queue"], namespace["sctx"]
    try:
        events = drain(queue)
        assert {e["type"] for e in events} == {"progress", "feedback"}
        assert {e["operation_id"] for e in events} == {result.operation_id}
        validators = {t: jsonschema.Draft202012Validator(load_schema(t)) for t in ("progress", "feedback")}
        for event in events:
            validators[event["type"]].validate(json.loads(json.dumps(event)))
        phases = [(e["slug"], e["status"]) for e in events if e["type"] == "progress" and "step" not in e]
        assert phases == [
            ("prepare", "running"),
            ("prepare", "succeeded"),
            ("build", "skipped"),
            ("distribute", "skipped"),
            ("tuning", "skipped"),
            ("runtime", "running"),
            ("runtime", "succeeded"),
            ("post_launch", "running"),
            ("post_launch", "succeeded"),
        ]
        assert result.state == "running" and result.name == "my-recipe"
        body = json.dumps({"model": "tiny-echo", "messages": [{"role": "user", "content": "hello there"}]}).encode()
        request = urllib.request.Request(f"{result.url}/v1/chat/completions", data=body, method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert json.load(response)["choices"][0]["message"]["content"]
    finally:
        api.stop(result.name, sctx=sctx)


def test_status_logs_and_stop_read_the_records(recipes, context):
    result = api.run(api.RunOptions(recipe="my-recipe"), sctx=context)
    (state,) = api.status(sctx=context)
    assert (state.name, state.state, state.port, state.pids) == ("my-recipe", "running", result.port, result.pids)
    assert any("serving tiny-echo" in line for line in api.logs("my-recipe", sctx=context))
    assert len(list(api.logs("my-recipe", tail=1, sctx=context))) == 1
    (stopped,) = api.stop("my-recipe", sctx=context)
    assert stopped.outcome == "terminated" and api.status(sctx=context) == []
    with pytest.raises(ProcessLookupError):
        os.killpg(result.pids[0], 0)


def test_without_a_subscriber_no_phase_events_are_tracked(recipes, tmp_path):
    sctx = initialize(state_dir=tmp_path / "quiet")
    result = api.run(api.RunOptions(recipe="my-recipe"), sctx=sctx)
    api.stop(result.name, sctx=sctx)
    assert result.state == "running"


def test_unknown_recipe_suggests_close_matches(recipes, context):
    with pytest.raises(RecipeError, match=r"unknown recipe \(recipe='my-recipee', .*\); did you mean my-recipe\?"):
        api.run(api.RunOptions(recipe="my-recipee"), sctx=context)
    (progress_failed,) = [e for e in drain(context.queue) if e.get("status") == "failed" and e["type"] == "progress"]
    assert progress_failed["slug"] == "prepare" and "my-recipee" in progress_failed["reason"]


def test_placeholder_without_value(recipes, context):
    name = _recipe(recipes, "gap", CHAT.format(name="gap").replace("--model {model}", "--model {model} --x {x}"))
    with pytest.raises(RecipeError, match=r"command placeholder \{x\} has no value"):
        api.run(api.RunOptions(recipe=name), sctx=context)
    assert DeploymentStore(context.config.state_dir).all() == []


def test_overrides_fill_placeholders(recipes, context):
    result = api.run(api.RunOptions(recipe="my-recipe", overrides={"model": "other-model"}), sctx=context)
    with urllib.request.urlopen(f"{result.url}/v1/models", timeout=5) as response:
        assert json.load(response)["data"][0]["id"] == "other-model"


def test_port_already_in_use(recipes, context):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(LaunchError, match=rf"port is already in use \(port={port}\)"):
            api.run(api.RunOptions(recipe="my-recipe", port=port), sctx=context)


def test_command_that_does_not_exist(recipes, context):
    name = _recipe(
        recipes,
        "ghost",
        'recipe_version: "1"\nname: ghost\nruntime: process\ncommand: "no-such-server-xyz --port {port}"\n',
    )
    with pytest.raises(LaunchError, match=r"command not found \(command='no-such-server-xyz'"):
        api.run(api.RunOptions(recipe=name), sctx=context)


def test_workload_exiting_during_startup_reports_code_and_log(recipes, context):
    body = """\
    recipe_version: "1"
    name: crash
    runtime: process
    command: "{python} -c \\"import sys; print('loading weights'); print('CUDA error: no device'); sys.exit(3)\\""
    """
    name = _recipe(recipes, "crash", body)
    with pytest.raises(LaunchError) as caught:
        api.run(api.RunOptions(recipe=name), sctx=context)
    message = str(caught.value)
    assert message.startswith("workload exited during startup with code 3 (pid=")
    assert message.endswith("last log lines:\nloading weights\nCUDA error: no device")
    assert DeploymentStore(context.config.state_dir).load("crash") is None


def test_readiness_timeout_stops_what_it_started(recipes, context):
    body = """\
    recipe_version: "1"
    name: slow
    runtime: process
    command: "{python} -c \\"import time; print('never listens', flush=True); time.sleep(60)\\""
    readiness:
      timeout: 1
    """
    name = _recipe(recipes, "slow", body)
    with pytest.raises(
        LaunchError, match=r"workload not ready within 1 s, still waiting for the port \(readiness.timeout=1"
    ):
        api.run(api.RunOptions(recipe=name), sctx=context)
    started = [e for e in drain(context.queue) if e["type"] == "feedback" and e.get("stage") == "start"]
    pid = started[0]["metrics"]["pid"]
    wait_for(lambda: not process_alive(pid), what=f"the unready workload (pid {pid}) to be stopped")


def test_stop_of_something_not_running(recipes, context):
    with pytest.raises(DeploymentError, match=r"no deployment with this name \(deployment='ghost', known: none\)"):
        api.stop("ghost", sctx=context)
    result = api.run(api.RunOptions(recipe="my-recipe"), sctx=context)
    os.killpg(result.pids[0], signal.SIGKILL)
    wait_for(lambda: not process_alive(result.pids[0]), what="the killed workload to be gone")
    with pytest.raises(DeploymentError, match=r"deployment is not running; its record is removed"):
        api.stop("my-recipe", sctx=context)
    with pytest.raises(ValueError, match="name is required unless all=True"):
        api.stop(sctx=context)


def test_two_runs_of_the_same_recipe(recipes, context):
    first = api.run(api.RunOptions(recipe="my-recipe"), sctx=context)
    with pytest.raises(DeploymentError, match=rf"already running \(deployment=my-recipe, pid={first.pids[0]}\)"):
        api.run(api.RunOptions(recipe="my-recipe"), sctx=context)
    second = api.run(api.RunOptions(recipe="my-recipe", name="my-recipe-2"), sctx=context)
    assert {d.name for d in api.status(sctx=context)} == {"my-recipe", "my-recipe-2"} and second.port != first.port


def test_stop_ends_the_whole_group_and_escalates(recipes, context):
    script = Path(__file__).parent / "workloads" / "stubborn.py"
    body = f"""\
    recipe_version: "1"
    name: stubborn
    runtime: process
    command: "{{python}} {script} {{port}}"
    readiness:
      timeout: 10
    """
    name = _recipe(recipes, "stubborn", body)
    api.run(api.RunOptions(recipe=name), sctx=context)
    (line,) = [line for line in api.logs(name, sctx=context) if line.startswith("child ")]
    child = int(line.split()[1])
    (stopped,) = api.stop(name, grace=0.5, sctx=context)
    assert stopped.outcome == "killed"
    # The child went down with its group.
    wait_for(lambda: not process_alive(child), what=f"the workload's child (pid {child}) to be gone")


def test_a_remote_host_that_does_not_resolve_is_named_with_the_cause(recipes, context):
    name = _recipe(recipes, "remote", CHAT.format(name="remote") + "hosts: [no-such-host.invalid]\n")
    with pytest.raises(
        HostError, match=r"^no-such-host.invalid: host unreachable at no-such-host.invalid:22: .*resolve"
    ) as raised:
        api.run(api.RunOptions(recipe=name), sctx=context)
    assert raised.value.kind == "unreachable" and raised.value.host == "no-such-host.invalid"
    assert api.status(sctx=context) == []


def test_distribution_providers_get_a_typed_request_with_a_bound_reporter(recipes, context):
    class Mirror:
        name = "mirror"

        def __init__(self):
            self.requests = []

        def accepts(self, request):
            return isinstance(request, ImagePullRequest)

        def distribute(self, request):
            self.requests.append(request)
            request.feedback.progress("copying", current=5, total=10, total_kind="upper_bound", unit="bytes")
            return DistributionResult(
                self.name, request.kind, request.source, {h: HostOutcome(h, "succeeded") for h in request.hosts}
            )

    name = _recipe(recipes, "dist", CHAT.format(name="dist") + "model: tiny-echo\nimage: registry.local/chat:1\n")
    mirror = Mirror()
    register_provider(mirror)
    try:
        result = api.run(api.RunOptions(recipe=name), sctx=context)
    finally:
        unregister_provider(mirror)
    (request,) = mirror.requests
    assert request.source == "registry.local/chat:1" and request.hosts == ("localhost",) and not request.force
    assert request.feedback.operation_id == result.operation_id
    events = drain(context.queue)
    distribute = [e for e in events if e["type"] == "progress" and e["slug"] == "distribute"]
    assert [e["status"] for e in distribute][-1] == "succeeded"
    assert [e["step"]["label"] for e in distribute if "step" in e] == ["image-pull on localhost: succeeded"]
    assert any(e["type"] == "feedback" and e["message"] == "copying" for e in events)


def test_a_provider_that_fails_a_host_fails_the_launch_before_anything_starts(recipes, context):
    class Broken:
        name = "broken"

        def accepts(self, request):
            return isinstance(request, ImagePullRequest)

        def distribute(self, request):
            return DistributionResult(
                self.name, request.kind, request.source, {"localhost": HostOutcome("localhost", "failed", "disk full")}
            )

    name = _recipe(recipes, "broken", CHAT.format(name="broken") + "image: registry.local/chat:1\n")
    broken = Broken()
    register_provider(broken)
    try:
        with pytest.raises(DistributionError, match=r"failed on 1 host\(s\): localhost: disk full"):
            api.run(api.RunOptions(recipe=name), sctx=context)
    finally:
        unregister_provider(broken)
    assert api.status(sctx=context) == []


def test_builtin_placeholders_cannot_be_overridden(recipes, context):
    with pytest.raises(
        ValueError, match=r"port is a built-in placeholder and cannot be overridden \(override=port\); use --port"
    ):
        api.run(api.RunOptions(recipe="my-recipe", overrides={"port": "80"}), sctx=context)


def test_name_placeholder_is_the_deployment_name(recipes, context):
    body = CHAT.format(name="named").replace("--model {model}", "--model {name}")
    name = _recipe(recipes, "named", body)
    result = api.run(api.RunOptions(recipe=name, name="named-b"), sctx=context)
    with urllib.request.urlopen(f"{result.url}/v1/models", timeout=5) as response:
        assert json.load(response)["data"][0]["id"] == "named-b"


def test_a_relaunch_starts_a_fresh_log(recipes, context):
    api.run(api.RunOptions(recipe="my-recipe"), sctx=context)
    api.stop("my-recipe", sctx=context)
    result = api.run(api.RunOptions(recipe="my-recipe"), sctx=context)
    assert sum("serving tiny-echo" in line for line in api.logs("my-recipe", sctx=context)) == 1
    assert not result.log_path.with_name(result.log_path.name + ".1").exists()  # only the last run is kept
