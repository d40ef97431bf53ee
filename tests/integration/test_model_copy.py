"""The model copy to real SSH test hosts (and to this machine): content-addressed, verified, resumable."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun import api
from sparkrun.application import initialize
from sparkrun.core.blob_relay import Blob, relay_to_host
from sparkrun.core.executors.agent_transport import LocalTransport
from sparkrun.core.operation import operation_scope
from sparkrun.errors import DistributionError
from sparkrun.feedback import get_feedback
from tests.integration.ssh_hosts import SshHost

pytestmark = pytest.mark.integration
STAGES = ["checking", "discovering", "transferring", "importing", "verifying"]


def _model(directory: Path, weights: int = 3 << 20) -> Path:
    model = directory / "tiny-model"
    (model / "tokenizer").mkdir(parents=True)
    (model / "weights.bin").write_bytes(os.urandom(weights))
    (model / "config.json").write_text('{"layers": 2}')
    (model / "tokenizer" / "tokenizer.json").write_text('{"vocab": {}}')
    (model / "copy-of-config.json").write_text('{"layers": 2}')  # same content: one blob
    return model


def _hosted(host: SshHost) -> Path:
    return host.home / ".local" / "state" / "sparkrun" / "hosted"


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def setup(tmp_path, ssh_hosts):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hosts": ssh_hosts.inventory()}), encoding="utf-8")
    events: list[dict[str, Any]] = []
    sctx = initialize(config_path=config, state_dir=tmp_path / "state", events=events.append)
    return sctx, events, _model(tmp_path)


def test_a_model_reaches_two_hosts_and_this_machine_verified_and_a_second_copy_sends_nothing(setup, ssh_hosts):
    sctx, events, model = setup
    result = api.distribute("model", str(model), ["spark-1", "spark-2", "localhost"], sctx=sctx)
    assert result.ok and list(result.hosts) == ["spark-1", "spark-2", "localhost"]
    for host in ssh_hosts.hosts:
        copied = _hosted(host) / "models" / "tiny-model"
        assert {p.relative_to(copied).as_posix() for p in copied.rglob("*") if p.is_file()} >= {
            "weights.bin",
            "config.json",
            "tokenizer/tokenizer.json",
            "copy-of-config.json",
        }
        assert _sha(copied / "weights.bin") == _sha(model / "weights.bin")
        assert copied.stat().st_uid == os.stat(host.home).st_uid  # written by the host's own user
    size = sum(p.stat().st_size for p in model.rglob("*") if p.is_file())
    unique = size - len('{"layers": 2}')
    assert result.hosts["spark-1"].metrics["wire_bytes"] == unique
    for host in ("spark-1", "spark-2"):
        feedback = [e for e in events if e.get("type") == "feedback" and e.get("host") == host]
        assert {e["source"] for e in feedback} == {"model-copy"}
        assert [s for s in dict.fromkeys(e.get("stage") for e in feedback) if s] == STAGES
        counters = [e for e in feedback if e.get("unit") == "bytes"]
        assert counters and all(e["total_kind"] == "upper_bound" and e["total"] == unique for e in counters)
        final = feedback[-1]
        assert final["stage"] == "verifying" and final["status"] == "succeeded"
        assert final["metrics"]["wire_bytes"] == unique and final["metrics"]["reused_files"] == 0

    events.clear()
    again = api.distribute("model", str(model), ["spark-1", "spark-2"], sctx=sctx)
    for outcome in again.hosts.values():
        assert outcome.metrics["wire_bytes"] == 0 and outcome.metrics["reused_bytes"] == unique
        assert outcome.metrics["duration_seconds"] < 1.0
    listed = api.distribution_list("spark-2", sctx=sctx)["models"]
    assert [(m["name"], m["files"]) for m in listed] == [("tiny-model", 4)]


def test_a_blob_altered_on_one_host_fails_that_host_only_naming_it_and_force_repairs(setup, ssh_hosts):
    sctx, _events, model = setup
    api.distribute("model", str(model), ["spark-1", "spark-2"], sctx=sctx)
    weights = f"sha256:{_sha(model / 'weights.bin')}"
    blob = _hosted(ssh_hosts.hosts[1]) / "models" / "blobs" / "sha256" / weights.split(":")[1]
    data = bytearray(blob.read_bytes())
    data[100] ^= 0xFF
    blob.write_bytes(bytes(data))
    with pytest.raises(DistributionError) as raised:
        api.distribute("model", str(model), ["spark-1", "spark-2"], sctx=sctx)
    result = raised.value.result
    assert result.hosts["spark-1"].outcome == "succeeded" and result.hosts["spark-2"].outcome == "failed"
    assert f"{weights}: content hashes to sha256:" in result.hosts["spark-2"].error
    assert str(raised.value).startswith("model ") and "failed on 1 host(s): spark-2:" in str(raised.value)
    repaired = api.distribute("model", str(model), ["spark-2"], force=True, sctx=sctx)
    assert repaired.ok and repaired.hosts["spark-2"].metrics["wire_bytes"] > 0


def _relay(tmp_path, blobs: list[Blob]) -> tuple[Any, list[dict[str, Any]]]:
    from sparkrun.plugins.model_copy.files import ModelFile
    from sparkrun.plugins.model_copy.provider import _ModelReceiver

    events: list[dict[str, Any]] = []
    sctx = initialize(state_dir=tmp_path / "state", events=events.append)
    files = [ModelFile(f"f{i}", b.digest, b.size, 0o644, b.path) for i, b in enumerate(blobs)]
    with operation_scope(sctx, name="relay"):
        reporter = get_feedback("model-copy", sctx=sctx).child(host="localhost")
        relayed = relay_to_host(
            LocalTransport("localhost", tmp_path / "hosted"), reporter, blobs, _ModelReceiver("m", files)
        )
    return relayed, events


def _blob(path: Path, content: bytes) -> Blob:
    path.write_bytes(content)
    return Blob(f"sha256:{hashlib.sha256(content).hexdigest()}", len(content), path)


def test_a_blob_altered_on_the_wire_is_caught_on_arrival_with_its_digest(tmp_path):
    good = _blob(tmp_path / "good", b"g" * 1000)
    claimed = _blob(tmp_path / "bad", b"original content")
    (tmp_path / "bad").write_bytes(b"altered content!")  # same size, other bytes: what a flipped wire would bring
    relayed, events = _relay(tmp_path, [good, claimed])
    assert relayed.outcome == "failed"
    assert relayed.error.startswith(f"1 blob(s) arrived corrupted on localhost: {claimed.digest} arrived as sha256:")
    final = [e for e in events if e.get("type") == "feedback"][-1]
    assert final["stage"] == "transferring" and final["status"] == "failed" and final["level"] == "error"
    store = tmp_path / "hosted" / "models" / "blobs" / "sha256"
    assert sorted(p.name for p in store.iterdir()) == [good.digest.split(":")[1]]  # nothing unverified kept


def test_a_truncated_source_cuts_the_stream_and_an_interrupted_relay_resumes(tmp_path):
    first = _blob(tmp_path / "a", os.urandom(200_000))
    second = _blob(tmp_path / "b", os.urandom(300_000))
    (tmp_path / "b").write_bytes((tmp_path / "b").read_bytes()[:1000])  # shrank after it was described
    relayed, _ = _relay(tmp_path, [first, second])
    assert relayed.outcome == "failed" and f"source of {second.digest} ended 299000 bytes early" in relayed.error
    store = tmp_path / "hosted" / "models" / "blobs" / "sha256"
    assert [p.name for p in store.iterdir() if not p.name.startswith(".")] == [first.digest.split(":")[1]]
    second = _blob(tmp_path / "b", os.urandom(300_000))
    resumed, _ = _relay(tmp_path, [first, second])
    assert resumed.outcome == "succeeded", resumed.error
    assert resumed.metrics["wire_bytes"] == 300_000 and resumed.metrics["reused_files"] == 1
    assert not [p for p in store.iterdir() if p.name.startswith(".")]  # no half-written leftovers


def test_the_cli_copies_a_model_and_names_bad_input(tmp_path, ssh_hosts):
    model = _model(tmp_path, weights=1 << 20)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hosts": ssh_hosts.inventory()}), encoding="utf-8")
    env.update(SPARKRUN_CONFIG=str(config), SPARKRUN_STATE_DIR=str(tmp_path / "state"), SPARKRUN_OTEL="0")
    sparkrun = str(Path(sys.executable).with_name("sparkrun"))

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sparkrun, *args], capture_output=True, text=True, env=env, timeout=60)

    done = cli("distribute", "model", str(model), "--host", "spark-1", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["type"] == "result" and result["hosts"]["spark-1"]["outcome"] == "succeeded"
    listed = cli("distribute", "list", "--host", "spark-1")
    assert "model tiny-model  4 files" in listed.stdout
    for args, message in [
        (("distribute", "model", str(tmp_path / "nope"), "--host", "spark-1"), "must be a directory"),
        (("distribute", "model", str(model), "--host", "-oProxyCommand=id"), "is not a host name"),
        (("distribute", "model", str(model), "--host", "spark-1", "--host", "spark-1"), "named more than once"),
        (("distribute", "image", "docker://x", "--host", "spark-1"), "no distribution provider accepts"),
    ]:
        bad = cli(*args)
        assert bad.returncode == 1 and message in bad.stderr, (args, bad.stderr)
        assert "Traceback" not in bad.stderr


def test_ctrl_c_during_a_copy_exits_130_and_the_next_copy_completes_it(tmp_path, ssh_hosts):
    import signal

    model = tmp_path / "big-model"
    model.mkdir()
    for index in range(6):  # several files: some arrive whole before the interruption
        (model / f"shard-{index}.bin").write_bytes(os.urandom(24 << 20))
    total = 6 * (24 << 20)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hosts": ssh_hosts.inventory()}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
    env.update(SPARKRUN_CONFIG=str(config), SPARKRUN_STATE_DIR=str(tmp_path / "state"), SPARKRUN_OTEL="0")
    sparkrun = str(Path(sys.executable).with_name("sparkrun"))
    copying = subprocess.Popen(
        [sparkrun, "distribute", "model", str(model), "--host", "spark-1", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    for line in copying.stdout:  # interrupt as the blobs start to travel (144 MB take far longer than a signal)
        if json.loads(line).get("stage") == "transferring":
            break
    copying.send_signal(signal.SIGINT)
    _, stderr = copying.communicate(timeout=60)
    assert copying.returncode == 130, stderr
    assert "interrupted; verified blobs stay on the hosts" in stderr and "Traceback" not in stderr
    sctx = initialize(config_path=config, state_dir=tmp_path / "state")
    resumed = api.distribute("model", str(model), ["spark-1"], sctx=sctx)
    metrics = resumed.hosts["spark-1"].metrics
    assert resumed.ok and metrics["wire_bytes"] + metrics["reused_bytes"] == total  # whatever arrived whole stays
    hosted = ssh_hosts.hosts[0].home / ".local" / "state" / "sparkrun" / "hosted" / "models" / "blobs" / "sha256"
    assert not [path for path in hosted.iterdir() if path.name.startswith(".")]  # nothing half-written is left
