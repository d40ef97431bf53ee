"""OCI image layouts read, verified and tagged by hand-written files: every bad input has its own message."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkrun.plugins.oci_relay import layout as layout_module
from sparkrun.plugins.oci_relay.layout import (
    DOCKER_MANIFEST,
    DOCKER_MANIFEST_LIST,
    MAX_JSON_SIZE,
    OCI_INDEX,
    OCI_MANIFEST,
    REF_NAME,
    Descriptor,
    Image,
    LayoutError,
    blob_path,
    hash_file,
    init_layout,
    parse_reference,
    read_image,
    tag_manifest,
    tags,
    verify_blob,
)

TAG_RULE = "a tag is 1 to 128 characters of A-Z a-z 0-9 _ . - and does not start with . or -"
DIGEST_RULE = "it must be 'sha256:' and 64 lowercase hex digits"
SIZE_RULE = "it must be an integer from 0 to 1099511627776 (1 TiB)"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
GOOD_DIGEST = "sha256:" + "ab" * 32


def _raises(message: str) -> Any:
    """``pytest.raises`` for exactly ``message``."""
    import re

    return pytest.raises(LayoutError, match=f"^{re.escape(message)}$")


# --- parse_reference -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("oci:/data/img:v1", ("/data/img", "v1")),
        ("oci:img", ("img", None)),
        ("oci:/data/img", ("/data/img", None)),
        ("oci:/mnt/a:b/img", ("/mnt/a:b/img", None)),  # what follows the last ':' has a '/': part of the path
        ("oci:/mnt/a:b/img:v1", ("/mnt/a:b/img", "v1")),
        ("oci:x:y:z", ("x:y", "z")),  # only the last ':' starts a tag
        ("oci:../../x:tag", ("../../x", "tag")),  # a local path, kept as written: not normalized
        ("oci:rel/dir:_t.1-X", ("rel/dir", "_t.1-X")),
        ("oci:/p:" + "a" * 128, ("/p", "a" * 128)),
    ],
)
def test_parse_reference_accepts(text, expected):
    assert parse_reference(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("oci:", "image is 'oci:'; the layout path after 'oci:' is empty"),
        ("oci::v1", "image is 'oci::v1'; the layout path after 'oci:' is empty"),
        ("docker://x", "image is 'docker://x'; it must be 'oci:PATH' or 'oci:PATH:TAG' (an OCI image layout)"),
        ("OCI:/p", "image is 'OCI:/p'; it must be 'oci:PATH' or 'oci:PATH:TAG' (an OCI image layout)"),
        ("", "image is ''; it must be 'oci:PATH' or 'oci:PATH:TAG' (an OCI image layout)"),
        ("oci:/p:bad tag", f"image is 'oci:/p:bad tag'; its tag 'bad tag' is invalid: {TAG_RULE}"),
        ("oci:/p:", f"image is 'oci:/p:'; its tag '' is invalid: {TAG_RULE}"),
        ("oci:/p:-x", f"image is 'oci:/p:-x'; its tag '-x' is invalid: {TAG_RULE}"),
        ("oci:/p:.x", f"image is 'oci:/p:.x'; its tag '.x' is invalid: {TAG_RULE}"),
        ("oci:/p:v1\n", f"image is 'oci:/p:v1\\n'; its tag 'v1\\n' is invalid: {TAG_RULE}"),
        ("oci:/p\n:v1", "image is 'oci:/p\\n:v1'; the layout path must not contain control characters"),
        ("oci:/p\x00", "image is 'oci:/p\\x00'; the layout path must not contain control characters"),
    ],
)
def test_parse_reference_refuses(text, message):
    with _raises(message):
        parse_reference(text)


def test_parse_reference_refuses_a_129_character_tag():
    text = "oci:/p:" + "a" * 129
    with pytest.raises(LayoutError, match=r"^image is 'oci:/p:a{69}\.\.\.; its tag 'a{76}\.\.\. is invalid: a tag"):
        parse_reference(text)


def test_parse_reference_refuses_a_non_string():
    with _raises("image is None; it must be 'oci:PATH' or 'oci:PATH:TAG' (an OCI image layout)"):
        parse_reference(None)  # type: ignore[arg-type]


_PATHS = st.text(st.characters(blacklist_characters=":", blacklist_categories=("Cc", "Cs")), min_size=1)
_TAGS = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}", fullmatch=True)


@given(_PATHS, _TAGS)
def test_parse_reference_round_trips_path_and_tag(path, tag):
    assert parse_reference(f"oci:{path}:{tag}") == (path, tag)
    assert parse_reference(f"oci:{path}") == (path, None)


@given(st.text())
def test_parse_reference_raises_only_layout_errors(text):
    try:
        path, tag = parse_reference("oci:" + text)
    except LayoutError as exc:
        assert str(exc).startswith("image is ")
    else:
        assert path and ("oci:" + text) == f"oci:{path}" + (f":{tag}" if tag is not None else "")


# --- Descriptor ------------------------------------------------------------------------------------------------


def test_descriptor_round_trips_through_json():
    data = {"mediaType": LAYER_TYPE, "digest": GOOD_DIGEST, "size": 12, "annotations": {"x": "y"}}
    descriptor = Descriptor.from_json(data, "f")
    assert descriptor == Descriptor(LAYER_TYPE, GOOD_DIGEST, 12)
    assert descriptor.to_json() == {"mediaType": LAYER_TYPE, "digest": GOOD_DIGEST, "size": 12}


@pytest.mark.parametrize("size", [0, 2**40])
def test_descriptor_size_limits_are_inclusive(size):
    assert Descriptor.from_json({"mediaType": "t", "digest": GOOD_DIGEST, "size": size}, "f").size == size


def test_descriptor_media_type_of_255_characters_is_accepted():
    assert Descriptor.from_json({"mediaType": "t" * 255, "digest": GOOD_DIGEST, "size": 1}, "f").media_type == "t" * 255


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"digest": "sha256:../../etc/passwd"}, f"f.digest is 'sha256:../../etc/passwd'; {DIGEST_RULE}"),
        ({"digest": "sha256:" + "AB" * 32}, f"f.digest is 'sha256:{'AB' * 32}'; {DIGEST_RULE}"),
        ({"digest": GOOD_DIGEST + "\n"}, f"f.digest is 'sha256:{'ab' * 32}\\n'; {DIGEST_RULE}"),
        ({"digest": "sha512:" + "ab" * 32}, f"f.digest is 'sha512:{'ab' * 32}'; {DIGEST_RULE}"),
        ({"digest": "sha256:" + "ab" * 31}, f"f.digest is 'sha256:{'ab' * 31}'; {DIGEST_RULE}"),
        ({"digest": 7}, f"f.digest is 7; {DIGEST_RULE}"),
        ({"digest": None}, f"f.digest is None; {DIGEST_RULE}"),
        ({"size": -1}, f"f.size is -1; {SIZE_RULE}"),
        ({"size": 2**40 + 1}, f"f.size is 1099511627777; {SIZE_RULE}"),
        ({"size": 1.0}, f"f.size is 1.0; {SIZE_RULE}"),
        ({"size": float("nan")}, f"f.size is nan; {SIZE_RULE}"),
        ({"size": float("inf")}, f"f.size is inf; {SIZE_RULE}"),
        ({"size": True}, f"f.size is True; {SIZE_RULE}"),
        ({"size": "12"}, f"f.size is '12'; {SIZE_RULE}"),
        ({"mediaType": ""}, "f.mediaType is ''; it must be a string of 1 to 255 characters"),
        ({"mediaType": 3}, "f.mediaType is 3; it must be a string of 1 to 255 characters"),
        ({"mediaType": "t" * 256}, f"f.mediaType is '{'t' * 76}...; it must be a string of 1 to 255 characters"),
    ],
)
def test_descriptor_refuses(change, message):
    data = {"mediaType": LAYER_TYPE, "digest": GOOD_DIGEST, "size": 1, **change}
    with _raises(message):
        Descriptor.from_json(data, "f")


@pytest.mark.parametrize(
    ("missing", "message"),
    [
        ("mediaType", "f.mediaType is missing; it must be a string of 1 to 255 characters"),
        ("digest", f"f.digest is missing; {DIGEST_RULE}"),
        ("size", f"f.size is missing; {SIZE_RULE}"),
    ],
)
def test_descriptor_names_a_missing_field(missing, message):
    data = {"mediaType": LAYER_TYPE, "digest": GOOD_DIGEST, "size": 1}
    del data[missing]
    with _raises(message):
        Descriptor.from_json(data, "f")


@pytest.mark.parametrize(("data", "shown"), [([], "[]"), ("x", "'x'"), (None, "None"), (5, "5")])
def test_descriptor_must_be_an_object(data, shown):
    with _raises(f"f is {shown}; it must be a JSON object"):
        Descriptor.from_json(data, "f")


# --- hand-built layouts ----------------------------------------------------------------------------------------


def _write_blob(layout: Path, content: bytes, media_type: str) -> Descriptor:
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    path = layout / "blobs" / "sha256" / digest[7:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return Descriptor(media_type, digest, len(content))


def _write_json_blob(layout: Path, doc: Any, media_type: str) -> Descriptor:
    return _write_blob(layout, json.dumps(doc).encode(), media_type)


def _entry(descriptor: Descriptor, tag: str | None = None, **extra: Any) -> dict[str, Any]:
    entry = {**descriptor.to_json(), **extra}
    if tag is not None:
        entry["annotations"] = {REF_NAME: tag}
    return entry


def _write_index(layout: Path, manifests: list[Any]) -> None:
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))


def _new_layout(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
    (path / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    _write_index(path, [])
    return path


def _image(layout: Path, name: str, media_type: str = OCI_MANIFEST, layer_count: int = 2) -> Image:
    """A manifest with a config and ``layer_count`` layers, all blobs written; not yet in index.json."""
    config = _write_json_blob(layout, {"architecture": "amd64", "os": "linux", "name": name}, CONFIG_TYPE)
    layers = tuple(_write_blob(layout, f"{name} layer {i}".encode(), LAYER_TYPE) for i in range(layer_count))
    doc = {"schemaVersion": 2, "config": config.to_json(), "layers": [layer.to_json() for layer in layers]}
    if media_type == DOCKER_MANIFEST:
        doc["mediaType"] = DOCKER_MANIFEST
    return Image(_write_json_blob(layout, doc, media_type), config, layers)


@pytest.fixture
def layout(tmp_path) -> Path:
    return _new_layout(tmp_path / "layout")


def test_read_image_returns_the_tagged_manifest_config_and_layers(layout):
    first, second = _image(layout, "one"), _image(layout, "two", layer_count=3)
    _write_index(layout, [_entry(first.manifest, "one"), _entry(second.manifest, "two")])
    assert read_image(layout, "two") == second
    assert read_image(layout, "one") == first
    assert tags(layout) == {"one": first.manifest, "two": second.manifest}


def test_read_image_without_a_tag_takes_the_only_manifest(layout):
    image = _image(layout, "only")
    _write_index(layout, [_entry(image.manifest)])
    assert read_image(layout, None) == image
    assert tags(layout) == {}


def test_read_image_without_a_tag_among_several_lists_the_tags(layout):
    first, second = _image(layout, "one"), _image(layout, "two")
    _write_index(layout, [_entry(first.manifest, "v2"), _entry(second.manifest, "v1")])
    with _raises("index.json lists 2 manifests; name one with a tag (tags: v1, v2)"):
        read_image(layout, None)


def test_read_image_of_an_unknown_tag_lists_the_tags(layout):
    image = _image(layout, "one")
    _write_index(layout, [_entry(image.manifest, "v1")])
    with _raises("tag 'v2' is not in index.json (tags: v1)"):
        read_image(layout, "v2")


def test_read_image_of_an_empty_layout(layout):
    with _raises("index.json: manifests is empty; the layout holds no image"):
        read_image(layout, None)
    with _raises("tag 'v1' is not in index.json (tags: none)"):
        read_image(layout, "v1")


def test_a_tag_naming_two_manifests_is_refused(layout):
    first, second = _image(layout, "one"), _image(layout, "two")
    _write_index(layout, [_entry(first.manifest, "v1"), _entry(second.manifest, "v1")])
    with _raises("index.json: the tag 'v1' names 2 manifests; it must name one"):
        read_image(layout, "v1")
    with _raises("index.json: the tag 'v1' names more than one manifest"):
        tags(layout)


def test_read_image_checks_the_requested_tag(layout):
    with _raises(f"tag is '../x'; {TAG_RULE}"):
        read_image(layout, "../x")


def test_read_image_accepts_docker_schema_2(layout):
    image = _image(layout, "docker", media_type=DOCKER_MANIFEST)
    listing = _write_json_blob(
        layout,
        {"schemaVersion": 2, "mediaType": DOCKER_MANIFEST_LIST, "manifests": [_entry(image.manifest)]},
        DOCKER_MANIFEST_LIST,
    )
    _write_index(layout, [_entry(image.manifest, "plain"), _entry(listing, "list")])
    assert read_image(layout, "plain") == image
    assert read_image(layout, "list") == image


def _platform(os_name: str, architecture: str, variant: str | None = None) -> dict[str, str]:
    platform = {"os": os_name, "architecture": architecture}
    if variant:
        platform["variant"] = variant
    return platform


def test_a_nested_index_resolves_to_the_platform(layout):
    arm, amd = _image(layout, "arm"), _image(layout, "amd")
    index = _write_json_blob(
        layout,
        {
            "schemaVersion": 2,
            "manifests": [
                _entry(arm.manifest, platform=_platform("linux", "arm64", "v8")),
                _entry(amd.manifest, platform=_platform("linux", "amd64")),
            ],
        },
        OCI_INDEX,
    )
    _write_index(layout, [_entry(index, "multi")])
    assert read_image(layout, "multi") == amd
    assert read_image(layout, "multi", platform="linux/arm64") == arm
    assert read_image(layout, "multi", platform="linux/arm64/v8") == arm
    with _raises("index " + index.digest + " has no manifest for the platform linux/s390x "
                 "(platforms: linux/amd64, linux/arm64/v8)"):  # fmt: skip
        read_image(layout, "multi", platform="linux/s390x")
    with _raises("platform is 'amd64'; it must be OS/ARCHITECTURE[/VARIANT], like 'linux/amd64'"):
        read_image(layout, "multi", platform="amd64")


def test_a_nested_index_with_one_entry_needs_no_platform(layout):
    image = _image(layout, "any")
    index = _write_json_blob(layout, {"schemaVersion": 2, "manifests": [_entry(image.manifest)]}, OCI_INDEX)
    _write_index(layout, [_entry(index, "v1")])
    assert read_image(layout, "v1", platform="linux/riscv64") == image


def test_indexes_nested_too_deep_are_refused(layout):
    descriptor = _image(layout, "deep").manifest
    for _ in range(4):
        descriptor = _write_json_blob(layout, {"schemaVersion": 2, "manifests": [_entry(descriptor)]}, OCI_INDEX)
    _write_index(layout, [_entry(descriptor, "v1")])
    with pytest.raises(LayoutError, match=r"manifests\[0\] is nested more than 4 indexes deep; real images use one$"):
        read_image(layout, "v1")


def test_three_nested_indexes_are_followed(layout):
    image = _image(layout, "deep")
    descriptor = image.manifest
    for _ in range(3):
        descriptor = _write_json_blob(layout, {"schemaVersion": 2, "manifests": [_entry(descriptor)]}, OCI_INDEX)
    _write_index(layout, [_entry(descriptor, "v1")])
    assert read_image(layout, "v1") == image


def test_the_manifest_blob_is_verified_before_it_is_read(layout):
    image = _image(layout, "one")
    _write_index(layout, [_entry(image.manifest, "v1")])
    path = blob_path(layout, image.manifest.digest)
    original = path.read_bytes()

    path.write_bytes(original.replace(b'"schemaVersion": 2', b'"schemaVersion": 3'))
    found = "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    with _raises(f"blob {image.manifest.digest} does not match its digest: expected {image.manifest.digest}, "
                 f"found {found}"):  # fmt: skip
        read_image(layout, "v1")

    path.write_bytes(original[:-1])
    with _raises(f"blob {image.manifest.digest} holds {len(original) - 1} bytes; its descriptor says {len(original)}"):
        read_image(layout, "v1")

    path.unlink()
    with _raises(f"blob {image.manifest.digest} is missing ({path})"):
        read_image(layout, "v1")


def test_a_manifest_announced_larger_than_the_limit_is_not_read(layout):
    _write_index(layout, [{"mediaType": OCI_MANIFEST, "digest": GOOD_DIGEST, "size": MAX_JSON_SIZE + 1}])
    with _raises(f"index.json: manifests[0].size is {MAX_JSON_SIZE + 1}; a manifest or index is at most 4194304 bytes"):
        read_image(layout, None)


def test_an_index_entry_that_is_not_a_manifest_is_refused(layout):
    layer = _write_blob(layout, b"data", LAYER_TYPE)
    _write_index(layout, [_entry(layer, "v1")])
    with _raises(
        f"index.json: manifests[0].mediaType is {LAYER_TYPE!r}; it must be one of {DOCKER_MANIFEST_LIST}, "
        f"{DOCKER_MANIFEST}, {OCI_INDEX}, {OCI_MANIFEST}"
    ):
        read_image(layout, "v1")


def test_a_manifest_whose_body_says_another_media_type_is_refused(layout):
    docker = _image(layout, "docker", media_type=DOCKER_MANIFEST)
    relabelled = docker.manifest._replace(media_type=OCI_MANIFEST)
    _write_index(layout, [_entry(relabelled, "v1")])
    with _raises(
        f"manifest {relabelled.digest}: mediaType is {DOCKER_MANIFEST!r}; it must match its descriptor's "
        f"{OCI_MANIFEST!r}"
    ):
        read_image(layout, "v1")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"schemaVersion": 2, "layers": []}, "config is missing; it must be a JSON object"),
        ({"schemaVersion": 2, "config": "x", "layers": []}, "config is 'x'; it must be a JSON object"),
        ({"schemaVersion": 1, "config": {}, "layers": []}, "schemaVersion is 1; it must be 2"),
        ({"config": {}, "layers": []}, "schemaVersion is missing; it must be 2"),
        (
            {"schemaVersion": 2, "config": {"mediaType": CONFIG_TYPE, "digest": GOOD_DIGEST, "size": 1}},
            "layers is missing; it must be a list",
        ),
        (
            {
                "schemaVersion": 2,
                "config": {"mediaType": CONFIG_TYPE, "digest": GOOD_DIGEST, "size": 1},
                "layers": [
                    {"mediaType": LAYER_TYPE, "digest": GOOD_DIGEST, "size": 1},
                    {"mediaType": LAYER_TYPE, "digest": "sha256:../../../etc/shadow", "size": 1},
                ],
            },
            f"layers[1].digest is 'sha256:../../../etc/shadow'; {DIGEST_RULE}",
        ),
        ([], None),
    ],
)
def test_a_malformed_manifest_names_its_digest_and_field(layout, doc, message):
    manifest = _write_json_blob(layout, doc, OCI_MANIFEST)
    _write_index(layout, [_entry(manifest, "v1")])
    expected = f"manifest {manifest.digest} holds []; it must hold a JSON object" if message is None else (
        f"manifest {manifest.digest}: {message}"
    )  # fmt: skip
    with _raises(expected):
        read_image(layout, "v1")


# --- index.json and oci-layout, malformed and hostile ----------------------------------------------------------


def _index_text(*entries: str) -> str:
    return '{"schemaVersion": 2, "manifests": [' + ", ".join(entries) + "]}"


def _entry_text(**fields: str) -> str:
    values = {"mediaType": json.dumps(OCI_MANIFEST), "digest": json.dumps(GOOD_DIGEST), "size": "10", **fields}
    return "{" + ", ".join(f'"{key}": {value}' for key, value in values.items()) + "}"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            _index_text(_entry_text(digest='"sha256:../../../../etc/passwd"')),
            f"index.json: manifests[0].digest is 'sha256:../../../../etc/passwd'; {DIGEST_RULE}",
        ),
        (
            _index_text(_entry_text(), _entry_text(digest='"sha256:xyz"')),
            f"index.json: manifests[1].digest is 'sha256:xyz'; {DIGEST_RULE}",
        ),
        (
            _index_text(_entry_text(size="-1")),
            f"index.json: manifests[0].size is -1; {SIZE_RULE}",
        ),
        (
            _index_text(_entry_text(size="1e400")),
            f"index.json: manifests[0].size is inf; {SIZE_RULE}",
        ),
        (
            _index_text(_entry_text(size="123456789012345678901234567890")),
            f"index.json: manifests[0].size is 123456789012345678901234567890; {SIZE_RULE}",
        ),
        (
            _index_text(_entry_text(size="NaN")),
            "index.json is not valid JSON: NaN is not a JSON number",
        ),
        (
            _index_text(_entry_text(size="-Infinity")),
            "index.json is not valid JSON: -Infinity is not a JSON number",
        ),
        ('{"schemaVersion": 2, "manifests": ["x"]}', "index.json: manifests[0] is 'x'; it must be a JSON object"),
        ('{"schemaVersion": 2, "manifests": {}}', "index.json: manifests is {}; it must be a list"),
        ('{"schemaVersion": 2}', "index.json: manifests is missing; it must be a list"),
        ('{"schemaVersion": true, "manifests": []}', "index.json: schemaVersion is True; it must be 2"),
        ('{"schemaVersion": "2", "manifests": []}', "index.json: schemaVersion is '2'; it must be 2"),
        ("[]", "index.json holds []; it must hold a JSON object"),
        ("null", "index.json holds None; it must hold a JSON object"),
        ("", "index.json is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
        (
            _index_text(_entry_text()).replace('"manifests"', '"manifests": [], "manifests"'),
            "index.json is not valid JSON: the key 'manifests' appears twice in one object",
        ),
        (
            _index_text(_entry_text(annotations='"tag"')),
            "index.json: manifests[0].annotations is 'tag'; it must be a JSON object",
        ),
        (
            _index_text(_entry_text(annotations=f'{{"{REF_NAME}": 5}}')),
            f"index.json: manifests[0].annotations['{REF_NAME}'] is 5; it must be a string",
        ),
    ],
)
def test_a_malformed_index_json_is_named(layout, text, message):
    (layout / "index.json").write_text(text)
    with _raises(message):
        read_image(layout, None)
    with _raises(message):
        tags(layout)


def test_an_index_json_with_a_huge_integer_is_refused(layout):
    (layout / "index.json").write_text(_index_text(_entry_text(size="9" * 5000)))
    with pytest.raises(LayoutError, match=r"^index.json is not valid JSON: Exceeds the limit \(\d+ digits\)"):
        read_image(layout, None)


def test_a_deeply_nested_index_json_is_refused(layout):
    (layout / "index.json").write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(LayoutError, match=r"^index.json is not valid JSON: maximum recursion depth exceeded"):
        read_image(layout, None)


def test_index_json_not_utf8(layout):
    (layout / "index.json").write_bytes(b'{"schemaVersion": 2, "manifests": [], "x": "\xff"}')
    with _raises("index.json is not UTF-8 text (byte 44)"):
        read_image(layout, None)


def test_an_oversized_index_json_is_not_read(layout):
    index = layout / "index.json"
    index.write_bytes(b'{"schemaVersion": 2, "manifests": []}'.ljust(MAX_JSON_SIZE))
    assert tags(layout) == {}  # exactly the limit is fine
    index.write_bytes(b'{"schemaVersion": 2, "manifests": []}'.ljust(MAX_JSON_SIZE + 1))
    with _raises("index.json is larger than 4194304 bytes, the limit for a layout's JSON files"):
        read_image(layout, None)


def test_an_index_json_that_is_a_fifo_does_not_hang(layout):
    index = layout / "index.json"
    index.unlink()
    os.mkfifo(index)
    with _raises(f"index.json is not a regular file ({index})"):
        read_image(layout, None)


def test_a_missing_index_json_or_marker(layout):
    (layout / "index.json").unlink()
    with _raises(f"index.json is missing ({layout / 'index.json'})"):
        read_image(layout, None)
    (layout / "oci-layout").unlink()
    with _raises(f"oci-layout is missing ({layout / 'oci-layout'})"):
        read_image(layout, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"imageLayoutVersion": "2.0.0"}', "oci-layout: imageLayoutVersion is '2.0.0'; it must be '1.0.0'"),
        ("{}", "oci-layout: imageLayoutVersion is missing; it must be '1.0.0'"),
        ('"1.0.0"', "oci-layout holds '1.0.0'; it must hold a JSON object"),
    ],
)
def test_a_wrong_oci_layout_marker(layout, text, message):
    (layout / "oci-layout").write_text(text)
    with _raises(message):
        read_image(layout, None)
    with _raises(message):
        init_layout(layout)
    assert (layout / "oci-layout").read_text() == text  # never rewritten


# --- Image, blobs ----------------------------------------------------------------------------------------------


def test_image_blobs_are_in_order_and_unique():
    manifest = Descriptor(OCI_MANIFEST, "sha256:" + "1" * 64, 100)
    config = Descriptor(CONFIG_TYPE, "sha256:" + "2" * 64, 10)
    a = Descriptor(LAYER_TYPE, "sha256:" + "3" * 64, 1000)
    b = Descriptor(LAYER_TYPE, "sha256:" + "4" * 64, 5)
    image = Image(manifest, config, (a, b, a))
    assert image.blobs == (manifest, config, a, b)
    assert image.total_size == 1115


def test_blob_path_stays_in_blobs_sha256(tmp_path):
    assert blob_path(tmp_path, GOOD_DIGEST) == tmp_path / "blobs" / "sha256" / ("ab" * 32)
    with _raises(f"digest is 'sha256:../../{'a' * 58}'; {DIGEST_RULE}"):
        blob_path(tmp_path, "sha256:../../" + "a" * 58)


@pytest.mark.parametrize("size", [0, 1, 6, 7, 8, 100])
def test_hash_file_streams_any_size(tmp_path, size):
    data = os.urandom(size)
    (tmp_path / "f").write_bytes(data)
    assert hash_file(tmp_path / "f", chunk=7) == ("sha256:" + hashlib.sha256(data).hexdigest(), size)


def test_verify_blob(layout):
    blob = _write_blob(layout, b"some layer bytes", LAYER_TYPE)
    verify_blob(layout, blob)
    path = blob_path(layout, blob.digest)

    path.write_bytes(b"some layer bytez")
    found = "sha256:" + hashlib.sha256(b"some layer bytez").hexdigest()
    with _raises(f"blob {blob.digest} does not match its digest: expected {blob.digest}, found {found}"):
        verify_blob(layout, blob)

    path.write_bytes(b"some layer")
    with _raises(f"blob {blob.digest} holds 10 bytes; its descriptor says 16"):
        verify_blob(layout, blob)

    path.unlink()
    with _raises(f"blob {blob.digest} is missing ({path})"):
        verify_blob(layout, blob)

    path.mkdir()
    with _raises(f"blob {blob.digest} is not a regular file ({path})"):
        verify_blob(layout, blob)


# --- init_layout and tag_manifest ------------------------------------------------------------------------------


def test_init_layout_creates_an_empty_layout(tmp_path):
    target = tmp_path / "a" / "b"
    init_layout(target)
    assert json.loads((target / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    assert json.loads((target / "index.json").read_text()) == {"schemaVersion": 2, "manifests": []}
    assert (target / "blobs" / "sha256").is_dir()
    assert tags(target) == {}


def test_init_layout_leaves_an_existing_layout_alone(layout):
    image = _image(layout, "one")
    _write_index(layout, [_entry(image.manifest, "v1")])
    before = {path: path.read_bytes() for path in layout.rglob("*") if path.is_file()}
    init_layout(layout)
    assert {path: path.read_bytes() for path in layout.rglob("*") if path.is_file()} == before


def test_init_layout_completes_a_partial_layout(tmp_path):
    (tmp_path / "l" / "blobs").mkdir(parents=True)
    (tmp_path / "l" / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    init_layout(tmp_path / "l")
    assert tags(tmp_path / "l") == {}


def test_init_layout_refuses_a_broken_index_and_a_file(tmp_path, layout):
    (layout / "index.json").write_text("{")
    with pytest.raises(LayoutError, match=r"^index\.json is not valid JSON: "):
        init_layout(layout)
    assert (layout / "index.json").read_text() == "{"
    (tmp_path / "file").write_text("x")
    with pytest.raises(LayoutError, match=f"^layout '{tmp_path / 'file'}' cannot be created: "):
        init_layout(tmp_path / "file")


def test_tag_manifest_adds_and_replaces_keeping_other_entries(layout):
    first, second, third = _image(layout, "one"), _image(layout, "two"), _image(layout, "three")
    foreign = {**first.manifest.to_json(), "platform": _platform("linux", "amd64"), "annotations": {"x": "y"}}
    _write_index(layout, [foreign])
    tag_manifest(layout, second.manifest, "v1")
    tag_manifest(layout, third.manifest, "v2")
    assert tags(layout) == {"v1": second.manifest, "v2": third.manifest}
    tag_manifest(layout, first.manifest, "v1")  # v1 moves: the old entry goes
    doc = json.loads((layout / "index.json").read_text())
    assert doc == {
        "schemaVersion": 2,
        "manifests": [foreign, _entry(third.manifest, "v2"), _entry(first.manifest, "v1")],
    }
    assert read_image(layout, "v1") == first
    assert sorted(path.name for path in layout.iterdir()) == ["blobs", "index.json", "oci-layout"]  # no temp file


def test_tag_manifest_needs_the_verified_manifest_blob(layout):
    image = _image(layout, "one")
    path = blob_path(layout, image.manifest.digest)
    path.write_bytes(path.read_bytes()[:-1])
    with _raises(f"blob {image.manifest.digest} holds {image.manifest.size - 1} bytes; its descriptor says "
                 f"{image.manifest.size}"):  # fmt: skip
        tag_manifest(layout, image.manifest, "v1")
    assert tags(layout) == {}


def test_tag_manifest_refuses_bad_tags_and_descriptors(layout):
    image = _image(layout, "one")
    with _raises(f"tag is 'a b'; {TAG_RULE}"):
        tag_manifest(layout, image.manifest, "a b")
    with _raises(f"manifest.digest is 'sha256:../x'; {DIGEST_RULE}"):
        tag_manifest(layout, image.manifest._replace(digest="sha256:../x"), "v1")
    with _raises(f"manifest.size is -5; {SIZE_RULE}"):
        tag_manifest(layout, image.manifest._replace(size=-5), "v1")
    with _raises(
        f"manifest.mediaType is {LAYER_TYPE!r}; it must be one of {DOCKER_MANIFEST_LIST}, {DOCKER_MANIFEST}, "
        f"{OCI_INDEX}, {OCI_MANIFEST}"
    ):
        tag_manifest(layout, image.layers[0], "v1")
    assert tags(layout) == {}


def test_concurrent_tagging_loses_no_tag(layout):
    images = [_image(layout, f"i{n}") for n in range(4)]
    errors: list[BaseException] = []

    def tag_all(worker: int) -> None:
        try:
            for round_ in range(10):
                tag_manifest(layout, images[(worker + round_) % 4].manifest, f"w{worker}-r{round_}")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=tag_all, args=(worker,)) for worker in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(tags(layout)) == sorted(f"w{w}-r{r}" for w in range(8) for r in range(10))


# --- what the receiver's bare python3 can run ------------------------------------------------------------------


def test_layout_module_is_standard_library_python_3_8():
    source = Path(layout_module.__file__).read_text()
    tree = ast.parse(source, feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__"} <= set(sys.stdlib_module_names)
    assert "dataclasses" not in imported
    assert "from __future__ import annotations" in source
