"""The layout module against real images: built by umoci, and what it writes accepted by skopeo and umoci."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkrun.plugins.oci_relay.layout import (
    DOCKER_MANIFEST,
    OCI_MANIFEST,
    Image,
    LayoutError,
    blob_path,
    init_layout,
    read_image,
    tag_manifest,
    tags,
    verify_blob,
)
from tests.integration.oci_images import (
    build_benchmark_image,
    build_image,
    derive_image,
    skopeo_inspect,
    umoci_unpack,
)

pytestmark = pytest.mark.integration

HELLO = b"hello from a real layer\n"
BASE_LAYERS = [
    {"etc/hello.txt": HELLO, "etc/empty": b""},
    {"opt/model/weights.bin": 300_000},
    {"bin/run": b"#!/bin/sh\n"},
]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A layout with ``base`` (three layers) and ``app`` (base plus one), built once and only read."""
    layout = tmp_path_factory.mktemp("oci") / "images"
    build_image(layout, "base", BASE_LAYERS)
    derive_image(layout, "base", "app", {"app/main.py": b"print('hi')\n"})
    return layout


@pytest.fixture
def copy(built, tmp_path) -> Path:
    """A copy of the built layout that a test may break."""
    return Path(shutil.copytree(built, tmp_path / "copy"))


def _layer_descriptors(manifest: dict) -> list[tuple[str, str, int]]:
    return [(layer["mediaType"], layer["digest"], layer["size"]) for layer in manifest["layers"]]


def test_read_image_gives_what_skopeo_reports(built):
    image = read_image(built, "base")
    raw = skopeo_inspect(built, "base", raw=True)
    inspected = skopeo_inspect(built, "base")

    assert image.manifest.media_type == OCI_MANIFEST
    assert image.manifest.digest == inspected["Digest"]
    assert json.loads(blob_path(built, image.manifest.digest).read_bytes()) == raw
    assert (image.config.digest, image.config.size) == (raw["config"]["digest"], raw["config"]["size"])
    assert [tuple(layer) for layer in image.layers] == _layer_descriptors(raw)
    assert [layer.digest for layer in image.layers] == inspected["Layers"]
    assert len(image.layers) == 3

    assert image.total_size == sum(blob_path(built, blob.digest).stat().st_size for blob in image.blobs)
    for blob in image.blobs:
        verify_blob(built, blob)


def test_a_truncated_layer_is_named_by_its_digest(copy):
    layer = read_image(copy, "base").layers[1]
    path = blob_path(copy, layer.digest)
    with path.open("r+b") as file:
        file.truncate(layer.size - 1000)
    with pytest.raises(LayoutError) as caught:
        verify_blob(copy, layer)
    assert str(caught.value) == f"blob {layer.digest} holds {layer.size - 1000} bytes; its descriptor says {layer.size}"


def test_a_flipped_byte_is_named_by_its_digest_and_umoci_agrees(copy, tmp_path):
    layer = read_image(copy, "base").layers[1]
    path = blob_path(copy, layer.digest)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    found = "sha256:" + hashlib.sha256(data).hexdigest()
    with pytest.raises(LayoutError) as caught:
        verify_blob(copy, layer)
    assert str(caught.value) == f"blob {layer.digest} does not match its digest: expected {layer.digest}, found {found}"
    with pytest.raises(RuntimeError, match="umoci unpack"):
        umoci_unpack(copy, "base", tmp_path / "bundle")


def _copy_image(source: Path, target: Path, image: Image) -> None:
    for blob in image.blobs:
        shutil.copyfile(blob_path(source, blob.digest), blob_path(target, blob.digest))
        verify_blob(target, blob)


def test_a_manifest_tagged_into_a_fresh_layout_is_accepted_by_skopeo_and_umoci(built, tmp_path):
    image = read_image(built, "app")
    fresh = tmp_path / "fresh"
    init_layout(fresh)
    _copy_image(built, fresh, image)
    tag_manifest(fresh, image.manifest, "copied")

    assert tags(fresh) == {"copied": image.manifest}
    inspected = skopeo_inspect(fresh, "copied")
    assert inspected["Digest"] == image.manifest.digest
    assert inspected["Layers"] == [layer.digest for layer in image.layers]

    rootfs = umoci_unpack(fresh, "copied", tmp_path / "bundle")
    assert (rootfs / "etc" / "hello.txt").read_bytes() == HELLO
    assert (rootfs / "etc" / "empty").read_bytes() == b""
    assert (rootfs / "opt" / "model" / "weights.bin").stat().st_size == 300_000
    assert (rootfs / "app" / "main.py").read_bytes() == b"print('hi')\n"

    # Retagging moves the tag: skopeo now sees the base image under it.
    base = read_image(built, "base")
    _copy_image(built, fresh, base)
    tag_manifest(fresh, base.manifest, "copied")
    assert skopeo_inspect(fresh, "copied")["Digest"] == base.manifest.digest
    assert not (umoci_unpack(fresh, "copied", tmp_path / "bundle-2") / "app").exists()


def test_a_umoci_layout_keeps_its_tags_when_initialized_and_tagged(copy):
    before = {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()}
    init_layout(copy)
    assert {path: path.read_bytes() for path in copy.rglob("*") if path.is_file()} == before

    base = read_image(copy, "base")
    tag_manifest(copy, base.manifest, "also-base")
    listed = subprocess.run(["umoci", "ls", "--layout", str(copy)], capture_output=True, text=True, check=True)
    assert sorted(listed.stdout.split()) == ["also-base", "app", "base"]
    assert skopeo_inspect(copy, "also-base")["Digest"] == base.manifest.digest


def test_a_derived_image_shares_its_base_layers(built):
    base, app = read_image(built, "base"), read_image(built, "app")
    assert app.layers[:3] == base.layers
    assert len(app.layers) == 4
    assert app.manifest != base.manifest and app.config != base.config
    # What a host holding base still needs for app: its manifest, config and the one new layer.
    have = {blob.digest for blob in base.blobs}
    assert [blob for blob in app.blobs if blob.digest not in have] == [app.manifest, app.config, app.layers[3]]


def test_docker_schema_2_images_written_by_skopeo(built, tmp_path):
    docker = tmp_path / "docker"
    subprocess.run(
        ["skopeo", "copy", "--quiet", "--format", "v2s2", f"oci:{built}:base", f"oci:{docker}:base"],
        check=True,
        capture_output=True,
    )
    image = read_image(docker, "base")
    assert image.manifest.media_type == DOCKER_MANIFEST
    # skopeo 1.9 writes such a layout but cannot read it back ("no descriptor found"): compare with the blob.
    raw = json.loads(blob_path(docker, image.manifest.digest).read_bytes())
    assert raw["mediaType"] == DOCKER_MANIFEST
    assert [tuple(layer) for layer in image.layers] == _layer_descriptors(raw)
    assert [layer.digest for layer in image.layers] == [layer.digest for layer in read_image(built, "base").layers]
    for blob in image.blobs:
        verify_blob(docker, blob)


def test_the_benchmark_image_builder_makes_incompressible_layers(tmp_path):
    size = (3 << 20) + 5
    build_benchmark_image(tmp_path / "bench", total_size=size, layer_count=3)
    image = read_image(tmp_path / "bench", "bench")
    assert len(image.layers) == 3
    assert all(layer.size > size // 3 for layer in image.layers)  # gzip could not shrink them
    assert len({layer.digest for layer in image.layers}) == 3
    rootfs = umoci_unpack(tmp_path / "bench", "bench", tmp_path / "bundle")
    sizes = sorted(path.stat().st_size for path in (rootfs / "weights").iterdir())
    assert sizes == [size // 3, size // 3 + 1, size // 3 + 1] and sum(sizes) == size
