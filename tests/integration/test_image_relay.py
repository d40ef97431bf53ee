"""The image relay to real SSH test hosts, with images built by umoci and checked by skopeo and umoci."""

from __future__ import annotations

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
from sparkrun.errors import DistributionError
from tests.integration.oci_images import build_image, derive_image, skopeo_inspect, umoci_unpack
from tests.integration.ssh_hosts import SshHost

pytestmark = pytest.mark.integration
STAGES = ["checking", "discovering", "transferring", "importing", "verifying"]


def _store(host: SshHost) -> Path:
    return host.home / ".local" / "state" / "sparkrun" / "hosted" / "images"


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    """A layout with ``base`` (two layers) and ``app`` (base + one layer)."""
    layout = tmp_path_factory.mktemp("images") / "layout"
    build_image(
        layout, "base", [{"etc/os-release": b"ID=sparkrun-test\n", "usr/lib/big.bin": 2 << 20}, {"opt/a": 300_000}]
    )
    derive_image(layout, "base", "app", {"srv/app.py": b"print('serving')\n", "srv/weights": 1 << 20})
    return layout


@pytest.fixture
def context(tmp_path, ssh_hosts):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hosts": ssh_hosts.inventory()}), encoding="utf-8")
    events: list[dict[str, Any]] = []
    return initialize(config_path=config, state_dir=tmp_path / "state", events=events.append), events


def _per_host(events: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("type") == "feedback" and e.get("host") == host]


def test_an_image_reaches_two_hosts_whole_and_skopeo_and_umoci_read_it_there(images, context, ssh_hosts, tmp_path):
    sctx, events = context
    result = api.distribute("image", f"oci:{images}:base", ["spark-1", "spark-2"], sctx=sctx)
    assert result.ok
    source = skopeo_inspect(images, "base")
    for host in ssh_hosts.hosts:
        there = skopeo_inspect(_store(host), "base")
        assert there["Digest"] == source["Digest"] and there["Layers"] == source["Layers"]
        rootfs = umoci_unpack(_store(host), "base", tmp_path / f"unpacked-{host.name}")
        assert (rootfs / "etc" / "os-release").read_bytes() == b"ID=sparkrun-test\n"
        assert (rootfs / "usr" / "lib" / "big.bin").stat().st_size == 2 << 20
        feedback = _per_host(events, host.name)
        assert {e["source"] for e in feedback} == {"oci-relay"}
        assert [s for s in dict.fromkeys(e.get("stage") for e in feedback) if s] == STAGES
        assert all(e["total_kind"] == "upper_bound" for e in feedback if e.get("unit") == "bytes")
        imported = next(e for e in feedback if e.get("stage") == "importing" and "files" in e.get("metrics", {}))
        assert imported["metrics"]["files"] == 3 and imported["metrics"]["cache_errors"] == 0
        assert imported["metrics"]["engine"].startswith("skipped: no container engine")
        final = feedback[-1]
        assert final["stage"] == "verifying" and final["status"] == "succeeded"
        assert final["metrics"]["reused_layers"] == 0 and final["metrics"]["wire_bytes"] > 2 << 20
    assert result.hosts["spark-1"].present[0].startswith(f"image base@{source['Digest']} in ")


def test_a_derived_image_reuses_its_base_layers_and_a_second_relay_sends_nothing(images, context, ssh_hosts):
    sctx, _events = context
    api.distribute("image", f"oci:{images}:base", ["spark-1", "spark-2"], sctx=sctx)
    derived = api.distribute("image", f"oci:{images}:app", ["spark-1", "spark-2"], sctx=sctx)
    metrics = derived.hosts["spark-1"].metrics
    assert metrics["reused_layers"] == 2 and metrics["reused_bytes"] > 2 << 20
    assert metrics["wire_bytes"] < (1 << 20) + 100_000  # the new layer, its config and manifest
    again = api.distribute("image", f"oci:{images}:app", ["spark-1", "spark-2"], sctx=sctx)
    for outcome in again.hosts.values():
        assert outcome.metrics["wire_bytes"] == 0 and outcome.metrics["duration_seconds"] < 1.0
    listed = api.distribution_list("spark-2", sctx=sctx)["images"]
    assert {image["tag"] for image in listed} >= {"base", "app"}


def test_a_layer_altered_on_one_host_fails_that_host_naming_its_digest(images, context, ssh_hosts):
    sctx, _ = context
    api.distribute("image", f"oci:{images}:base", ["spark-1", "spark-2"], sctx=sctx)
    layer = skopeo_inspect(images, "base")["Layers"][0]
    blob = _store(ssh_hosts.hosts[0]) / "blobs" / "sha256" / layer.split(":")[1]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01  # same size: discovery takes it as present, only verification can tell
    blob.write_bytes(bytes(data))
    with pytest.raises(DistributionError) as raised:
        api.distribute("image", f"oci:{images}:base", ["spark-1", "spark-2"], sctx=sctx)
    result = raised.value.result
    assert result.hosts["spark-2"].outcome == "succeeded" and result.hosts["spark-1"].outcome == "failed"
    assert f"{layer}: content hashes to sha256:" in result.hosts["spark-1"].error
    repaired = api.distribute("image", f"oci:{images}:base", ["spark-1"], force=True, sctx=sctx)
    assert repaired.ok


def test_a_layer_cut_short_on_a_host_is_sent_again(images, context, ssh_hosts):
    sctx, _ = context
    api.distribute("image", f"oci:{images}:base", ["spark-2"], sctx=sctx)
    inspected = skopeo_inspect(images, "base", raw=True)
    layer = inspected["layers"][1]
    blob = _store(ssh_hosts.hosts[1]) / "blobs" / "sha256" / layer["digest"].split(":")[1]
    blob.write_bytes(blob.read_bytes()[:-10])
    healed = api.distribute("image", f"oci:{images}:base", ["spark-2"], sctx=sctx)
    assert healed.ok and healed.hosts["spark-2"].metrics["wire_bytes"] == layer["size"]


def test_bad_image_references_are_named(images, context):
    sctx, _ = context
    for source, message in [
        (f"oci:{images}:no-such-tag", "no-such-tag"),
        (f"oci:{images.parent / 'missing'}:base", "oci-layout"),
        ("oci:", "image"),
    ]:
        with pytest.raises((DistributionError, ValueError)) as raised:
            api.distribute("image", source, ["localhost"], sctx=sctx)
        assert message in str(raised.value), (source, str(raised.value))


def test_a_recipe_with_image_and_model_distributes_per_host_before_launching(images, tmp_path, ssh_hosts):
    model = tmp_path / "models" / "tiny-model"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"layers": 1}')
    recipe = tmp_path / "shipped.yaml"
    recipe.write_text(
        'recipe_version: "1"\nname: shipped\nruntime: process\n'
        'command: "{python} -m http.server {port} --bind {host}"\n'
        f"image: oci:{images}:app\nmodel: models/tiny-model\n"
        "hosts: [spark-1, spark-2]\nreadiness:\n  timeout: 20\n",
        encoding="utf-8",
    )
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"hosts": ssh_hosts.inventory()}), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
    env.update(SPARKRUN_CONFIG=str(config), SPARKRUN_STATE_DIR=str(tmp_path / "state"))
    sparkrun = str(Path(sys.executable).with_name("sparkrun"))
    try:
        done = subprocess.run(
            [sparkrun, "run", str(recipe), "--json"], capture_output=True, text=True, env=env, timeout=120
        )
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines()]
        steps = [r["step"]["label"] for r in records if r.get("slug") == "distribute" and "step" in r]
        assert any("image on spark-1: succeeded" in s for s in steps) and any(
            "model on spark-2: succeeded" in s for s in steps
        )
        relays = {
            (r["source"], r["host"])
            for r in records
            if r.get("stage") == "verifying" and r.get("status") == "succeeded"
        }
        assert relays == {
            ("oci-relay", "spark-1"),
            ("oci-relay", "spark-2"),
            ("model-copy", "spark-1"),
            ("model-copy", "spark-2"),
        }
        operation = records[-1]["operation_id"]
        trace = json.loads(
            subprocess.run(
                [sparkrun, "trace", "show", operation, "--json"],
                capture_output=True,
                text=True,
                env=env,
                timeout=60,
                check=True,
            ).stdout
        )
        text = json.dumps(trace)
        for host in ("spark-1", "spark-2"):
            assert text.count(f'"{host}"') >= 2  # a span per host for the image and the model
    finally:
        subprocess.run([sparkrun, "stop", "shipped"], capture_output=True, env=env, timeout=60)


def test_a_daemon_job_relays_an_image_and_streams_each_hosts_phases(images, start_daemon, ssh_hosts):
    from tests.integration.daemon_harness import message_events

    daemon = start_daemon()
    config = yaml.safe_load(daemon.config.read_text())
    daemon.config.write_text(yaml.safe_dump({**config, "hosts": ssh_hosts.inventory()}))
    daemon.stop()
    daemon.start()
    job_id = daemon.submit("distribute", kind="image", source=f"oci:{images}:app", hosts=["spark-1", "spark-2"])[
        "job_id"
    ]
    job = daemon.wait_state(job_id, timeout=120)
    assert job["state"] == "succeeded", job
    assert {host: outcome["outcome"] for host, outcome in job["result"]["hosts"].items()} == {
        "spark-1": "succeeded",
        "spark-2": "succeeded",
    }
    events = [event.data for event in message_events(daemon.replay(job_id))]
    for host in ("spark-1", "spark-2"):
        stages = [e.get("stage") for e in events if e.get("host") == host and e.get("source") == "oci-relay"]
        assert [s for s in dict.fromkeys(stages) if s] == STAGES


def test_a_multi_platform_index_relays_the_platform_asked_for(images, context, ssh_hosts):
    """An index naming ``app`` for linux/amd64 and ``base`` for linux/arm64 (a DGX Spark's platform)."""
    import hashlib

    from sparkrun.plugins.oci_relay.layout import OCI_INDEX, Descriptor, tag_manifest, tags

    sctx, _ = context
    known = tags(images)
    entries = []
    for tag, architecture in (("app", "amd64"), ("base", "arm64")):
        entry = known[tag].to_json()
        entries.append({**entry, "platform": {"os": "linux", "architecture": architecture}})
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()
    digest = hashlib.sha256(index).hexdigest()
    (images / "blobs" / "sha256" / digest).write_bytes(index)
    tag_manifest(images, Descriptor(OCI_INDEX, f"sha256:{digest}", len(index)), "multi")
    arm = api.distribute("image", f"oci:{images}:multi", ["spark-1"], platform="linux/arm64", sctx=sctx)
    assert arm.hosts["spark-1"].present[0].startswith(f"image multi@{known['base'].digest} ")
    assert skopeo_inspect(_store(ssh_hosts.hosts[0]), "multi")["Digest"] == known["base"].digest
    amd = api.distribute("image", f"oci:{images}:multi", ["spark-2"], sctx=sctx)  # the default, linux/amd64
    assert amd.hosts["spark-2"].present[0].startswith(f"image multi@{known['app'].digest} ")
    with pytest.raises(DistributionError, match=r"no manifest for the platform linux/s390x"):
        api.distribute("image", f"oci:{images}:multi", ["spark-1"], platform="linux/s390x", sctx=sctx)
    with pytest.raises(ValueError, match=r"platform is 'Linux AMD'; it must be os/architecture"):
        api.distribute("image", f"oci:{images}:multi", ["spark-1"], platform="Linux AMD", sctx=sctx)
