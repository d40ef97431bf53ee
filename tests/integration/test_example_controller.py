"""The example ColdSnap controller, run for real against the example workload on two loopback hosts.

Its receipts and timing streams are checked here by a checker written from the contract
(shared/spec/COLDSNAP.md), independent of both the controller's code and sparkrun's. Every server
a test starts is found by the module's unique model name and killed afterwards, even on failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER = ROOT / "examples" / "coldsnap" / "controller.py"
SERVER = ROOT / "examples" / "workloads" / "openai_server.py"
HOSTS = ("127.0.0.1", "127.0.0.2")
#: Unique per run of the module: the sweep finds the module's servers by it in their command lines.
MODEL = f"tiny-echo-{secrets.token_hex(4)}"
WORKLOAD = "example-coldsnap"
WARMUP_ANSWER = "echo: question up warm example coldsnap"  # the example server reverses the prompt's words
pytestmark = pytest.mark.integration

# -- an independent checker of the contract's wire formats ------------------------------------------

BASE_KEYS = {"format", "kind", "sequence", "event", "operation_id", "request_sha256"}
EVENT_KEYS = {
    "stream_start": set(),
    "clock": {"clock"},
    "span_start": {"span"},
    "span_complete": {"span"},
    "stream_complete": {"state", "timing_sha256"},
}
START_KEYS = {"id", "parent", "name", "clock", "start_offset_seconds", "attributes"}
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
RFC3339_NS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z")
REPLAY = {
    "capture": "conflict-on-existing-output",
    "publish": "content-idempotent",
    "publish-native": "content-idempotent",
    "restore": "reconcile-replace",
    "sleep": "convergent",
    "wake": "convergent",
    "status": "convergent",
}


def canonical_sha256(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def _strict(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    assert len(keys) == len(set(keys)), f"duplicate keys in {keys}"
    return dict(pairs)


@dataclass
class Stream:
    records: list[dict[str, Any]]
    clocks: dict[str, dict[str, Any]] = field(default_factory=dict)
    spans: list[dict[str, Any]] = field(default_factory=list)  # completed, in order
    starts: dict[str, dict[str, Any]] = field(default_factory=dict)
    complete: dict[str, Any] | None = None

    def named(self, name: str) -> list[dict[str, Any]]:
        return [span for span in self.spans if span["name"] == name]

    def one(self, name: str) -> dict[str, Any]:
        found = self.named(name)
        assert len(found) == 1, f"{len(found)} spans named {name}: {[span['name'] for span in self.spans]}"
        return found[0]

    def unit_of(self, span: dict[str, Any]) -> str | None:
        return span.get("attributes", {}).get("unit") or self.clocks[span["clock"]].get("unit")


def _check_attributes(span: dict[str, Any]) -> None:
    attributes = span.get("attributes", {})
    assert isinstance(attributes, dict) and len(attributes) <= 32
    assert all(isinstance(value, str) and len(value) <= 512 for value in attributes.values()), attributes


def check_stream(text: str, request: dict[str, Any], *, finished: bool = True) -> Stream:
    """Every rule of the timing stream; ``finished=False`` accepts a stream cut short."""
    assert text == "" or text.endswith("\n"), "every record ends its line"
    lines = text.splitlines()
    assert all(len(line.encode()) + 1 <= 64 * 1024 for line in lines)
    stream = Stream([json.loads(line, object_pairs_hook=_strict) for line in lines])
    assert stream.records and stream.records[0]["event"] == "stream_start"
    digests = {record["request_sha256"] for record in stream.records}
    assert len(digests) == 1 and DIGEST.fullmatch(digests.pop())
    seen: set[str] = set()
    for number, record in enumerate(stream.records, start=1):
        event = record["event"]
        assert set(record) == BASE_KEYS | EVENT_KEYS[event], record
        assert record["format"] == 1 and record["kind"] == "coldsnap-timing-event"
        assert record["sequence"] == number and record["operation_id"] == request["id"]
        assert stream.complete is None, "nothing follows stream_complete"
        if event == "stream_start":
            assert number == 1
        elif event == "clock":
            clock = record["clock"]
            assert set(clock) <= {"id", "source", "origin_unix_ns", "unit", "worker"}
            assert ID.fullmatch(clock["id"]) and clock["id"] not in stream.clocks
            assert isinstance(clock["source"], str) and 0 < len(clock["source"]) <= 64
            assert type(clock["origin_unix_ns"]) is int and clock["origin_unix_ns"] > 0
            stream.clocks[clock["id"]] = clock
        elif event == "span_start":
            span = record["span"]
            assert set(span) <= START_KEYS and {"id", "name", "clock", "start_offset_seconds"} <= set(span)
            assert span["id"] not in seen, f"duplicate or late start of {span['id']}"
            _check_span_identity(stream, span, seen)
            stream.starts[span["id"]] = span
            seen.add(span["id"])
        elif event == "span_complete":
            span = record["span"]
            assert span["id"] not in {done["id"] for done in stream.spans}, f"{span['id']} completed twice"
            started = stream.starts.get(span["id"])
            if started is None:
                _check_span_identity(stream, span, seen)
                seen.add(span["id"])
            else:
                repeated = {key: value for key, value in span.items() if key not in ("duration_seconds", "status")}
                attributes = dict(repeated.get("attributes", {}))
                if span["status"] == "error":
                    attributes.pop("error", None)
                assert {**repeated, "attributes": attributes} == {
                    **started,
                    "attributes": started.get("attributes", {}),
                }
            assert span["status"] in ("ok", "error")
            assert (span["status"] == "error") == ("error" in span.get("attributes", {})), span
            assert isinstance(span["duration_seconds"], float | int) and span["duration_seconds"] >= 0
            stream.spans.append(span)
        else:
            assert record["state"] in ("succeeded", "failed") and DIGEST.fullmatch(record["timing_sha256"])
            assert stream.clocks and stream.spans
            assert set(stream.starts) <= {span["id"] for span in stream.spans}, "open spans at stream_complete"
            stream.complete = record
    assert (stream.complete is not None) == finished
    return stream


def _check_span_identity(stream: Stream, span: dict[str, Any], seen: set[str]) -> None:
    assert ID.fullmatch(span["id"]) and isinstance(span["name"], str) and 0 < len(span["name"]) <= 128
    assert span["clock"] in stream.clocks, f"{span['id']}: clock {span['clock']} not declared before"
    assert re.fullmatch(re.escape(span["clock"]) + r"-\d+", span["id"]), span["id"]
    assert "parent" not in span or span["parent"] in seen, f"{span['id']}: parent {span.get('parent')} unseen"
    assert isinstance(span["start_offset_seconds"], float | int)
    _check_attributes(span)


def check_receipt(receipt: dict[str, Any], request: dict[str, Any], returncode: int, *, prepare_only: bool = False):
    required = {"format", "kind", "operation_id", "operation", "state", "request_sha256", "engine"}
    required |= {"snapshot_driver", "replay_semantics", "started_at", "completed_at", "duration_seconds"}
    required |= {"timing", "result"}
    failed = receipt.get("state") == "failed"
    assert set(receipt) == required | ({"error"} if failed else set()), sorted(receipt)
    assert receipt["format"] == 2 and receipt["kind"] == "coldsnap-operation-receipt"
    assert receipt["operation_id"] == request["id"] and receipt["operation"] == request["operation"]
    assert receipt["engine"] == request["launch"]["engine"]
    assert receipt["snapshot_driver"] == request["snapshot_driver"]["id"]
    assert receipt["request_sha256"] == canonical_sha256(request)
    assert receipt["state"] == ("failed" if returncode else "succeeded")
    assert receipt["replay_semantics"] == ("safe-repeat" if prepare_only else REPLAY[request["operation"]])
    assert RFC3339_NS.fullmatch(receipt["started_at"]) and RFC3339_NS.fullmatch(receipt["completed_at"])
    assert receipt["completed_at"] >= receipt["started_at"] and receipt["duration_seconds"] >= 0
    if failed:
        error = receipt["error"]
        assert isinstance(error, dict) and isinstance(error["message"], str) and error["message"]
    timing = receipt["timing"]
    assert set(timing) == {"format", "clocks", "spans"} and timing["format"] == 1
    assert 1 <= len(timing["clocks"]) <= 128 and 1 <= len(timing["spans"]) <= 2048
    assert set(receipt["result"]) <= {"artifact", "output", "prepared"}


def check_agreement(stream: Stream, receipt: dict[str, Any]) -> None:
    """The stream tells the same story as the receipt, which is authoritative."""
    assert list(stream.clocks.values()) == receipt["timing"]["clocks"]
    assert stream.spans == receipt["timing"]["spans"]
    assert stream.complete is not None
    assert stream.complete["timing_sha256"] == canonical_sha256(receipt["timing"])
    assert stream.complete["state"] == receipt["state"]
    assert stream.records[0]["request_sha256"] == receipt["request_sha256"]


# -- processes ----------------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """Running and not a zombie (nothing may reap a detached server's corpse here)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def module_servers() -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if MODEL.encode() in cmdline and alive(int(entry.name)):
                found.append(int(entry.name))
    return found


def kill_module_servers() -> None:
    for pid in module_servers():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not module_servers(), "the module's servers to die")


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    return result


def free_port(host: str) -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def ask(host: str, port: int, prompt: str = "are you there") -> str:
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}]}
        connection.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200
        return json.loads(response.read())["choices"][0]["message"]["content"]
    finally:
        connection.close()


def refused(host: str, port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex((host, port)) != 0


# -- running the controller --------------------------------------------------------------------------


@dataclass
class Outcome:
    request: dict[str, Any]
    returncode: int
    stdout: str
    stderr: str
    receipt_path: Path
    timing_path: Path

    @property
    def receipt(self) -> dict[str, Any]:
        return json.loads(self.receipt_path.read_text(), object_pairs_hook=_strict)

    def stream(self, *, finished: bool = True) -> Stream:
        return check_stream(self.timing_path.read_text(), self.request, finished=finished)

    def checked(self, *, prepare_only: bool = False) -> Stream:
        """Receipt and stream both valid and in agreement; the stream, for more questions."""
        receipt = self.receipt
        check_receipt(receipt, self.request, self.returncode, prepare_only=prepare_only)
        assert stat.S_IMODE(self.receipt_path.stat().st_mode) == 0o600
        stream = self.stream()
        check_agreement(stream, receipt)
        return stream


class Controller:
    """Builds requests like sparkrun's and runs the controller as sparkrun does (own session, stdin)."""

    def __init__(self, work: Path, ports: dict[str, int], artifact: Path) -> None:
        self.work, self.ports, self.artifact = work, ports, artifact
        self.state_dir = work / "state"
        self._runs = 0

    def request(self, operation: str, **changes: Any) -> dict[str, Any]:
        units = []
        for index, host in enumerate(HOSTS):
            port = self.ports[host]
            command = [sys.executable, str(SERVER), "--host", host, "--port", str(port), "--model", MODEL]
            units.append(
                {
                    "id": f"unit-{index}",
                    "index": index,
                    "host": host,
                    "port": port,
                    "command": [*command, "--startup-delay", "0.3"],
                    # Non-ASCII inside and beyond the BMP: the request digest must escape both alike.
                    "environment": {"PYTHONUNBUFFERED": "1", "EXAMPLE_NOTE": "caf\u00e9 \u2615 \U0001d11e"},
                }
            )
        suffix = "-" + secrets.token_hex(6) if operation in ("capture", "publish", "publish-native") else ""
        request: dict[str, Any] = {
            "format": 4,
            "kind": "coldsnap-operation-request",
            "id": f"{WORKLOAD}-{operation}{suffix}",
            "operation": operation,
            "snapshot_driver": {"id": "n580"},
            "launch": {
                "engine": "process",
                "model": {"id": MODEL, "revision": "main", "source": "example"},
                "units": units,
                "execution": {"workers": [{"id": f"worker-{i}", "unit": f"unit-{i}", "rank": i} for i in (0, 1)]},
            },
            "policy": {"cancel_grace_seconds": 30},
            "workload": {"name": WORKLOAD, "readiness": {"http_path": "/health", "timeout": 30.0}},
        }
        if operation != "status":
            request["lifecycle"] = {"activation_state": "sleeping" if operation == "sleep" else "active"}
        location = {"provider": "file", "uri": str(self.artifact)}
        request["output" if operation in ("capture", "publish", "publish-native") else "artifact"] = location
        request.update(changes)
        return request

    def _paths(self) -> tuple[Path, Path]:
        self._runs += 1
        run_dir = self.work / f"run-{self._runs}"
        run_dir.mkdir(parents=True)
        return run_dir / "operation.json", run_dir / "timing.ndjson"

    def command(self, request: dict[str, Any], receipt: Path, timing: Path, misbehave=(), prepare_only=False):
        example = ["--state-dir", str(self.state_dir)]
        for mode in misbehave:
            example += ["--misbehave", mode]
        contract = [request["operation"], "--request-json", "-"]
        contract += ["--prepare-only"] if prepare_only else []
        contract += ["--receipt-json", str(receipt), "--timing-events", str(timing)]
        return [sys.executable, str(CONTROLLER), *example, *contract]

    def run(
        self, operation: str, *, request: dict[str, Any] | None = None, misbehave=(), prepare_only=False
    ) -> Outcome:
        request = request or self.request(operation)
        receipt, timing = self._paths()
        completed = subprocess.run(
            self.command(request, receipt, timing, misbehave, prepare_only),
            input=json.dumps(request, sort_keys=True, indent=2) + "\n",
            capture_output=True,
            text=True,
            timeout=120,
            start_new_session=True,
            cwd=self.work,
        )
        return Outcome(request, completed.returncode, completed.stdout, completed.stderr, receipt, timing)

    def start(self, operation: str, *, misbehave=()) -> tuple[subprocess.Popen[str], Outcome]:
        """The controller in the background, for tests that signal it; the Outcome is filled on exit."""
        request = self.request(operation)
        receipt, timing = self._paths()
        stdin = receipt.parent / "request.json"
        stdin.write_text(json.dumps(request, sort_keys=True, indent=2) + "\n")
        with open(stdin) as request_file:
            process = subprocess.Popen(
                self.command(request, receipt, timing, misbehave),
                stdin=request_file,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
                cwd=self.work,
            )
        return process, Outcome(request, -1, "", "", receipt, timing)


def finish(process: subprocess.Popen[str], outcome: Outcome, timeout: float = 60) -> Outcome:
    stdout, stderr = process.communicate(timeout=timeout)
    outcome.returncode, outcome.stdout, outcome.stderr = process.returncode, stdout, stderr
    return outcome


def started_pids(stream: Stream) -> list[int]:
    """The pids the controller announced on its ``unit.startup`` spans."""
    return [int(span["attributes"]["pid"]) for span in stream.starts.values() if span["name"] == "unit.startup"]


def live_stream(outcome: Outcome) -> Stream:
    text = outcome.timing_path.read_text() if outcome.timing_path.exists() else ""
    return check_stream(text[: text.rfind("\n") + 1], outcome.request, finished=False) if text else Stream([])


# -- fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ports() -> dict[str, int]:
    return {host: free_port(host) for host in HOSTS}


@pytest.fixture(scope="module")
def artifact(tmp_path_factory, ports) -> Iterator[Path]:
    """One capture shared by the module's restore tests (they only read it)."""
    work = tmp_path_factory.mktemp("capture")
    try:
        controller = Controller(work, ports, work / "artifact")
        outcome = controller.run("capture")
        assert outcome.returncode == 0, outcome.stderr
        yield controller.artifact
    finally:
        kill_module_servers()


@pytest.fixture
def controller(tmp_path, ports, artifact) -> Iterator[Controller]:
    """A controller with a fresh state directory; every server of the module is killed afterwards."""
    try:
        yield Controller(tmp_path, ports, artifact)
    finally:
        kill_module_servers()


@pytest.fixture
def background() -> Iterator[Callable[[subprocess.Popen[str]], subprocess.Popen[str]]]:
    """Registers controllers started in the background; any still running is SIGKILLed afterwards."""
    started: list[subprocess.Popen[str]] = []
    yield lambda process: started.append(process) or process
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)


# -- capture ----------------------------------------------------------------------------------------


def test_capture_writes_the_artifact_and_stops_its_servers(controller, tmp_path):
    output = tmp_path / "captured"
    request = controller.request("capture", output={"provider": "file", "uri": str(output)})
    outcome = controller.run("capture", request=request)
    assert outcome.returncode == 0, outcome.stderr
    stream = outcome.checked()
    receipt = outcome.receipt
    manifest_bytes = (output / "manifest.json").read_bytes()
    manifest_sha256 = "sha256:" + hashlib.sha256(manifest_bytes).hexdigest()
    assert receipt["result"] == {"output": {"provider": "file", "uri": str(output), "manifest_sha256": manifest_sha256}}
    manifest = json.loads(manifest_bytes)
    assert manifest["model"]["id"] == MODEL and RFC3339_NS.fullmatch(manifest["created_at"])
    units = request["launch"]["units"]
    assert [unit["command"] for unit in manifest["units"]] == [unit["command"] for unit in units]
    assert manifest["warmup"]["answer_sha256"] == "sha256:" + hashlib.sha256(WARMUP_ANSWER.encode()).hexdigest()
    weights = output / manifest["weights"]["path"]
    assert weights.stat().st_size >= 1 << 20
    assert "sha256:" + hashlib.sha256(weights.read_bytes()).hexdigest() == manifest["weights"]["sha256"]
    shared = json.loads((controller.artifact / "manifest.json").read_text())
    assert shared["weights"]["sha256"] == manifest["weights"]["sha256"], "weights derive from the model id alone"
    for unit in manifest["units"]:
        capsule = output / unit["capsule"]["path"]
        assert "sha256:" + hashlib.sha256(capsule.read_bytes()).hexdigest() == unit["capsule"]["sha256"]
    assert [clock["id"] for clock in stream.clocks.values()] == ["controller", "worker-0", "worker-1"]
    assert [(clock.get("unit"), clock.get("worker")) for clock in list(stream.clocks.values())[1:]] == [
        ("unit-0", "worker-0"),
        ("unit-1", "worker-1"),
    ]
    root = stream.one("coldsnap.controller")
    assert "parent" not in root and root["clock"] == "controller"
    assert root["attributes"] == {
        "operation": "capture",
        "phase": "execute",
        "snapshot_driver": "n580",
        "units": "2",
        "workers": "2",
    }
    names = [span["name"] for span in stream.spans if span.get("parent") == root["id"]]
    for name in ("output.check", "coldsnap.hardware", "coordinator.start", "units.launch", "units.ready"):
        assert name in names
    assert {span["attributes"]["host"] for span in stream.named("unit.startup")} == set(HOSTS)
    write = stream.one("artifact.write")
    assert {span["name"] for span in stream.spans if span.get("parent") == write["id"]} == {
        "weights.write",
        "capsules.write",
        "manifest.write",
    }
    pids = started_pids(stream)
    assert len(pids) == 2 and not any(alive(pid) for pid in pids)
    assert not module_servers()


def test_capture_refuses_an_existing_output(controller, tmp_path):
    output = tmp_path / "taken"
    output.mkdir()
    (output / "keep.txt").write_text("mine")
    outcome = controller.run(
        "capture", request=controller.request("capture", output={"provider": "file", "uri": str(output)})
    )
    assert outcome.returncode == 1
    stream = outcome.checked()
    assert "already exists" in outcome.receipt["error"]["message"]
    assert stream.one("output.check")["status"] == "error"
    assert sorted(path.name for path in output.iterdir()) == ["keep.txt"]
    assert not stream.named("unit.startup") and not module_servers()


def test_a_unit_that_dies_fails_the_capture_and_the_others_are_stopped(controller, tmp_path):
    output = tmp_path / "not-captured"
    request = controller.request("capture", output={"provider": "file", "uri": str(output)})
    request["launch"]["units"][1]["command"] = [sys.executable, "-c", f"print('{MODEL} gives up'); raise SystemExit(3)"]
    outcome = controller.run("capture", request=request)
    assert outcome.returncode == 1
    stream = outcome.checked()
    message = outcome.receipt["error"]["message"]
    assert "unit-1" in message and "exited with code 3" in message and "gives up" in message
    assert stream.one("units.ready")["status"] == "error"
    assert stream.one("units.stop")["attributes"]["reason"] == "failed"
    assert not any(alive(pid) for pid in started_pids(stream)) and not module_servers()
    assert not output.exists() and not list(tmp_path.glob(".not-captured*"))


# -- restore ----------------------------------------------------------------------------------------


def test_prepare_only_prints_a_preparation_and_stages_the_capsules(controller):
    outcome = controller.run("restore", prepare_only=True)
    assert outcome.returncode == 0, outcome.stderr
    stream = outcome.checked(prepare_only=True)
    preparation = json.loads(outcome.stdout)
    assert preparation["kind"] == "coldsnap-restore-preparation"
    assert preparation["operation_id"] == outcome.request["id"]
    assert preparation["provider"] == outcome.request["artifact"]["provider"]
    assert preparation["snapshot_driver"] == {"id": "n580"}
    assert stream.one("coldsnap.controller")["attributes"]["phase"] == "prepare"
    stages = ["coldsnap.hardware", "coldsnap.artifact", "coldsnap.weights", "coldsnap.capsules"]
    root = stream.one("coldsnap.controller")["id"]
    assert [span["name"] for span in stream.spans if span.get("parent") == root] == stages
    prepared = outcome.receipt["result"]["prepared"]
    staged = Path(prepared["staged_dir"])
    assert staged.is_relative_to(controller.state_dir)
    for unit in ("unit-0", "unit-1"):
        assert (staged / f"{unit}.json").read_bytes() == (
            controller.artifact / "capsules" / f"{unit}.json"
        ).read_bytes()
    assert {stream.unit_of(span) for span in stream.named("capsule.stage")} == {"unit-0", "unit-1"}
    assert not module_servers()


def test_prepare_only_stops_at_the_first_failing_stage(controller, tmp_path):
    broken = tmp_path / "broken-artifact"
    shutil.copytree(controller.artifact, broken)
    with open(broken / "weights.bin", "r+b") as weights:
        weights.write(b"rot")
    request = controller.request("restore", artifact={"provider": "file", "uri": str(broken)})
    outcome = controller.run("restore", request=request, prepare_only=True)
    assert outcome.returncode == 1 and outcome.stdout == ""
    stream = outcome.checked(prepare_only=True)
    assert stream.one("coldsnap.weights")["status"] == "error"
    assert "digest" in outcome.receipt["error"]["message"]
    assert not stream.named("coldsnap.capsules")


def test_restore_starts_servers_that_answer_on_both_hosts(controller):
    outcome = controller.run("restore")
    assert outcome.returncode == 0, outcome.stderr
    stream = outcome.checked()
    assert outcome.receipt["result"]["artifact"]["uri"] == str(controller.artifact)
    for host in HOSTS:
        assert ask(host, controller.ports[host], "hello snapshot") == "echo: snapshot hello"
    for name in ("runtime.startup_port_open", "runtime.startup_http_ready", "runtime.startup_ttft"):
        spans = stream.named(name)
        assert sorted(stream.unit_of(span) for span in spans) == ["unit-0", "unit-1"]
        assert all(span["clock"].startswith("worker-") and span["status"] == "ok" for span in spans)
    for name in ("coldsnap.artifact", "capsule.pull", "coldsnap.workload.replace", "coordinator.start", "units.ready"):
        stream.one(name)
    pids = started_pids(stream)
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    for pid in pids:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]
        assert argv[-2:] == [b"--startup-delay", b"0"], "a restored unit skips the simulated loading"
        assert os.getsid(pid) == pid, "detached in its own session"
    record = json.loads((controller.state_dir / "workloads" / f"{WORKLOAD}.json").read_text())
    assert record["state"] == "running" and [unit["pid"] for unit in record["units"]] == pids
    assert all(type(unit["start_time"]) is int for unit in record["units"])


def test_restore_replaces_what_the_workload_runs(controller):
    first = controller.run("restore")
    assert first.returncode == 0, first.stderr
    old = started_pids(first.stream())
    second = controller.run("restore")
    assert second.returncode == 0, second.stderr
    stream = second.checked()
    assert stream.one("coldsnap.workload.replace")["attributes"]["running"] == "2"
    assert sorted(int(span["attributes"]["pid"]) for span in stream.named("unit.stop")) == sorted(old)
    assert not any(alive(pid) for pid in old)
    assert all(alive(pid) for pid in started_pids(stream))
    assert ask(HOSTS[1], controller.ports[HOSTS[1]]) == "echo: there you are"


def test_a_port_another_process_holds(controller, tmp_path):
    """Prepare-only reports it (sparkrun evicts its old workload after preparing); restore and capture refuse."""
    import socket

    host = HOSTS[1]
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        holder.bind((host, controller.ports[host]))
        holder.listen()
        prepared = controller.run("restore", prepare_only=True)
        assert prepared.returncode == 0, prepared.stderr
        probes = prepared.checked(prepare_only=True).named("hardware.probe")
        assert [probe["attributes"]["port_state"] for probe in probes] == ["free", "busy"]
        restored = controller.run("restore")
        assert restored.returncode == 1
        restored.checked()
        assert f"{host}:{controller.ports[host]} is in use by another process" in restored.receipt["error"]["message"]
        output = tmp_path / "not-captured"
        capture = controller.request("capture", output={"provider": "file", "uri": str(output)})
        captured = controller.run("capture", request=capture)
        assert captured.returncode == 1
        assert captured.checked().one("coldsnap.hardware")["status"] == "error"
        assert not output.exists()
    assert not module_servers()


# -- sleep, wake, status ----------------------------------------------------------------------------


def test_sleep_stops_the_servers_and_wake_starts_them_again(controller):
    restored = controller.run("restore")
    assert restored.returncode == 0, restored.stderr
    pids = started_pids(restored.stream())
    asleep = controller.run("sleep")
    assert asleep.returncode == 0, asleep.stderr
    stream = asleep.checked()
    assert {span["attributes"]["outcome"] for span in stream.named("unit.stop")} == {"terminated"}
    assert not any(alive(pid) for pid in pids)
    assert all(refused(host, controller.ports[host]) for host in HOSTS)
    again = controller.run("sleep")
    assert again.returncode == 0 and again.checked().one("units.stop")["attributes"]["units"] == "0"
    woken = controller.run("wake")
    assert woken.returncode == 0, woken.stderr
    stream = woken.checked()
    assert len(stream.named("runtime.startup_ttft")) == 2
    awake = started_pids(stream)
    assert all(alive(pid) for pid in awake)
    assert [ask(host, controller.ports[host], "good morning") for host in HOSTS] == ["echo: morning good"] * 2
    still = controller.run("wake")
    assert still.returncode == 0
    stream = still.checked()
    assert not stream.named("unit.startup"), "waking an awake workload starts nothing"
    assert [span["attributes"]["pid"] for span in stream.named("unit.status")] == [str(pid) for pid in awake]


def test_status_reports_what_runs(controller):
    assert controller.run("restore").returncode == 0
    running = controller.run("status")
    assert running.returncode == 0
    stream = running.checked()
    statuses = stream.named("unit.status")
    assert {
        (span["attributes"]["host"], span["attributes"]["alive"], span["attributes"]["answering"]) for span in statuses
    } == {(host, "true", "true") for host in HOSTS}
    assert {stream.unit_of(span) for span in statuses} == {"unit-0", "unit-1"}
    assert controller.run("sleep").returncode == 0
    sleeping = controller.run("status").checked()
    assert sleeping.one("units.status")["attributes"]["state"] == "sleeping"
    assert {span["attributes"]["alive"] for span in sleeping.named("unit.status")} == {"false"}


# -- refusals ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["publish", "publish-native"])
def test_publish_is_not_supported(controller, operation):
    outcome = controller.run(operation)
    assert outcome.returncode == 2
    assert "not supported by the example controller" in outcome.stderr
    outcome.checked()
    assert outcome.receipt["error"]["type"] == "unsupported-operation"


def test_a_host_off_this_machine_is_refused(controller):
    request = controller.request("restore")
    request["launch"]["units"][1]["host"] = "10.20.30.40"
    outcome = controller.run("restore", request=request)
    assert outcome.returncode == 2
    outcome.checked()
    assert "10.20.30.40" in outcome.receipt["error"]["message"] and "loopback" in outcome.receipt["error"]["message"]
    assert not module_servers()


@pytest.mark.parametrize("problem", ["timing-exists", "timing-relative", "both-on-stdout", "prepare-and-stdout"])
def test_invocations_the_contract_forbids_are_refused(controller, tmp_path, problem):
    request = controller.request("status")
    receipt, timing = str(tmp_path / "operation.json"), str(tmp_path / "timing.ndjson")
    extra = []
    if problem == "timing-exists":
        Path(timing).write_text("someone else's\n")
    elif problem == "timing-relative":
        timing = "timing.ndjson"
    elif problem == "both-on-stdout":
        receipt = timing = "-"
    else:
        request, timing, extra = controller.request("restore"), "-", ["--prepare-only"]
    command = [sys.executable, str(CONTROLLER), "--state-dir", str(controller.state_dir), request["operation"]]
    command += ["--request-json", "-", *extra, "--receipt-json", receipt, "--timing-events", timing]
    completed = subprocess.run(command, input=json.dumps(request), capture_output=True, text=True, cwd=tmp_path)
    assert completed.returncode == 2 and completed.stderr.strip()
    assert not (tmp_path / "operation.json").exists()
    if problem == "timing-exists":
        assert Path(timing).read_text() == "someone else's\n"


@pytest.mark.parametrize("on_stdout", ["timing", "receipt"])
def test_stdout_carries_the_stream_or_the_receipt(controller, tmp_path, on_stdout):
    request = controller.request("status")
    receipt = "-" if on_stdout == "receipt" else str(tmp_path / "operation.json")
    timing = "-" if on_stdout == "timing" else str(tmp_path / "timing.ndjson")
    command = [sys.executable, str(CONTROLLER), "--state-dir", str(controller.state_dir), "status"]
    command += ["--request-json", "-", "--receipt-json", receipt, "--timing-events", timing]
    completed = subprocess.run(command, input=json.dumps(request), capture_output=True, text=True, cwd=tmp_path)
    assert completed.returncode == 0, completed.stderr
    if on_stdout == "timing":
        stream, parsed = check_stream(completed.stdout, request), json.loads(Path(receipt).read_text())
    else:
        stream, parsed = check_stream(Path(timing).read_text(), request), json.loads(completed.stdout)
    check_receipt(parsed, request, 0)
    check_agreement(stream, parsed)


def test_a_successful_receipt_is_never_replaced(controller, tmp_path):
    first = controller.run("status")
    assert first.returncode == 0
    before = first.receipt_path.read_bytes()
    command = controller.command(first.request, first.receipt_path, tmp_path / "again.ndjson")
    completed = subprocess.run(command, input=json.dumps(first.request), capture_output=True, text=True)
    assert completed.returncode == 2 and "never replaced" in completed.stderr
    assert first.receipt_path.read_bytes() == before


# -- misbehaviour -----------------------------------------------------------------------------------


def test_wrong_digest(controller):
    outcome = controller.run("status", misbehave=["wrong-digest"])
    receipt = outcome.receipt
    check_receipt(receipt, outcome.request, outcome.returncode)
    stream = outcome.stream()
    assert stream.complete["timing_sha256"] != canonical_sha256(receipt["timing"])
    assert stream.spans == receipt["timing"]["spans"]


def test_wrong_request_digest(controller):
    outcome = controller.run("status", misbehave=["wrong-request-digest"])
    receipt = outcome.receipt
    check_receipt(receipt, outcome.request, outcome.returncode)
    stream = outcome.stream()
    assert {record["request_sha256"] for record in stream.records} != {receipt["request_sha256"]}
    assert stream.complete["timing_sha256"] == canonical_sha256(receipt["timing"])


def test_state_mismatch(controller):
    outcome = controller.run("status", misbehave=["state-mismatch"])
    assert outcome.returncode == 0 and outcome.receipt["state"] == "succeeded"
    assert outcome.stream().complete["state"] == "failed"


def test_missing_receipt(controller):
    outcome = controller.run("status", misbehave=["missing-receipt"])
    assert outcome.returncode == 0 and not outcome.receipt_path.exists()
    assert outcome.stream().complete["state"] == "succeeded"


def test_invalid_receipt(controller):
    outcome = controller.run("status", misbehave=["invalid-receipt"])
    assert outcome.returncode == 0
    with pytest.raises(ValueError):
        json.loads(outcome.receipt_path.read_text())
    assert stat.S_IMODE(outcome.receipt_path.stat().st_mode) == 0o600


@pytest.mark.parametrize(("name", "value"), [("engine", "vllm"), ("kind", "x"), ("format", 3)])
def test_receipt_field(controller, name, value):
    outcome = controller.run("status", misbehave=[f"receipt-field:{name}={json.dumps(value)}"])
    receipt = outcome.receipt
    assert receipt[name] == value
    receipt[name] = {"engine": "process", "kind": "coldsnap-operation-receipt", "format": 2}[name]
    check_receipt(receipt, outcome.request, outcome.returncode)


def test_exit_code_regardless(controller):
    outcome = controller.run("status", misbehave=["exit:3"])
    assert outcome.returncode == 3 and outcome.receipt["state"] == "succeeded"


def test_crash_mid_stream(controller):
    outcome = controller.run("restore", misbehave=["crash-mid-stream"])
    assert outcome.returncode == 70 and not outcome.receipt_path.exists()
    stream = outcome.stream(finished=False)
    assert len(stream.spans) >= 1 and stream.complete is None
    assert not module_servers()


@pytest.mark.parametrize("operation", ["restore", "capture"])
def test_sigterm_on_a_hang_cleans_up(controller, background, tmp_path, operation):
    if operation == "capture":
        controller.artifact = tmp_path / "never-written"
    process, outcome = controller.start(operation, misbehave=["hang"])
    background(process)
    stream = wait_until(lambda: _hanging(outcome), "the hang")
    pids = started_pids(stream)
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    os.killpg(process.pid, signal.SIGTERM)
    finish(process, outcome)
    assert outcome.returncode == 143
    stream = outcome.checked()
    assert outcome.receipt["error"]["type"] == "cancelled"
    assert stream.one("example.hang")["status"] == "error"
    assert stream.one("units.stop")["attributes"]["reason"] == "cancelled"
    assert not any(alive(pid) for pid in pids) and not module_servers()
    if operation == "capture":
        assert not list(tmp_path.glob("*never-written*")), "no artifact, complete or partial"


def _names(stream: Stream) -> set[str]:
    return {span["name"] for span in stream.starts.values()}


def _hanging(outcome: Outcome) -> Stream | None:
    stream = live_stream(outcome)
    return stream if "example.hang" in _names(stream) else None


def test_ignore_term_takes_sigkill(controller, background):
    process, outcome = controller.start("status", misbehave=["ignore-term"])
    background(process)
    wait_until(lambda: _hanging(outcome), "the hang")
    os.killpg(process.pid, signal.SIGTERM)
    with pytest.raises(subprocess.TimeoutExpired):
        process.wait(timeout=1.0)
    os.killpg(process.pid, signal.SIGKILL)
    finish(process, outcome)
    assert outcome.returncode == -signal.SIGKILL
    assert not outcome.receipt_path.exists() and outcome.stream(finished=False).complete is None


def test_fail_span(controller):
    outcome = controller.run("status", misbehave=["fail-span"])
    assert outcome.returncode == 1
    stream = outcome.checked()
    assert stream.one("example.injected_failure")["status"] == "error"
    assert stream.one("coldsnap.controller")["status"] == "error"
    assert outcome.receipt["error"]["message"]


def test_slow(controller):
    outcome = controller.run("status", misbehave=["slow"])
    assert outcome.returncode == 0
    assert outcome.checked().one("example.slow")["duration_seconds"] >= 1.0


@pytest.mark.parametrize("name", ["kind", "operation_id", "provider", "snapshot_driver"])
def test_bad_preparation(controller, name):
    outcome = controller.run("restore", prepare_only=True, misbehave=[f"bad-preparation:{name}"])
    assert outcome.returncode == 0
    outcome.checked(prepare_only=True)
    preparation = json.loads(outcome.stdout)
    request = outcome.request
    honest = {
        "kind": "coldsnap-restore-preparation",
        "operation_id": request["id"],
        "provider": request["artifact"]["provider"],
        "snapshot_driver": request["snapshot_driver"],
    }
    assert [key for key in honest if preparation[key] != honest[key]] == [name]
