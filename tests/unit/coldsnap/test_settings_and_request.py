"""The controller settings (command line > recipe > config) and the request sparkrun builds."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sparkrun.config import Config
from sparkrun.core.recipes import load_recipe
from sparkrun.core.targets import Target
from sparkrun.errors import ConfigError, RecipeError
from sparkrun.plugins.coldsnap.canonical import canonical_json, request_text, sha256_digest
from sparkrun.plugins.coldsnap.request import build_request, request_digest
from sparkrun.plugins.coldsnap.settings import resolve_settings

RECIPE = """\
recipe_version: "1"
name: snap
runtime: process
command: "{python} server.py --host {host} --port {port} --model {model}"
defaults: {model: tiny}
env: {TOKEN: s3cret}
hosts: [localhost, 127.0.0.2]
port: 18123
model: tiny
readiness: {http_path: /health, timeout: 5}
"""


def _recipe(tmp_path: Path, coldsnap: str = "") -> Path:
    path = tmp_path / "snap.yaml"
    path.write_text(RECIPE + coldsnap)
    return path


def _config(tmp_path: Path, values: dict | None = None) -> Config:
    return Config(state_dir=tmp_path / "state", path=tmp_path / "config.yaml", values=values or {})


SECTION = """\
coldsnap:
  controller: "{python} {recipe_dir}/ctl.py --fast"
  snapshot_driver: n580
  artifact: artifacts/snap
  policy: {cancel_grace_seconds: 30, mode: strict}
  model: {revision: main, source: example}
"""


def test_the_recipe_section_fills_every_setting(tmp_path):
    recipe = load_recipe(_recipe(tmp_path, SECTION))
    settings = resolve_settings(recipe, _config(tmp_path), workload="snap")
    assert settings.controller == (sys.executable, f"{tmp_path.resolve()}/ctl.py", "--fast")
    assert settings.snapshot_driver == "n580" and settings.engine == "process"
    artifact = (tmp_path / "state" / "coldsnap" / "artifacts" / "snap").resolve()  # relative: in the state dir
    assert settings.artifact.to_json() == {"provider": "file", "uri": str(artifact)}
    assert settings.output == settings.artifact  # capture writes what restore reads
    assert settings.cancel_grace_seconds == 30 and settings.policy["mode"] == "strict"


def test_the_command_line_wins_over_the_recipe_and_the_recipe_over_the_config(tmp_path):
    recipe = load_recipe(_recipe(tmp_path, SECTION))
    config = _config(tmp_path, {"coldsnap": {"controller": "from-config", "snapshot_driver": "n610"}})
    settings = resolve_settings(recipe, config, workload="snap", controller="my-ctl --x 'a b'", snapshot_driver="n999")
    assert settings.controller == ("my-ctl", "--x", "a b") and settings.snapshot_driver == "n999"
    bare = load_recipe(_recipe(tmp_path))
    from_config = resolve_settings(bare, config, workload="snap")
    assert from_config.controller == ("from-config",) and from_config.snapshot_driver == "n610"
    default = Path(tmp_path / "state" / "coldsnap" / "artifacts" / "snap").resolve()
    assert from_config.artifact.uri == str(default) and from_config.cancel_grace_seconds == 300


def test_no_controller_anywhere_says_where_to_set_one(tmp_path):
    recipe = load_recipe(_recipe(tmp_path))
    with pytest.raises(ConfigError, match=r"no ColdSnap controller for snap: pass --controller CMD"):
        resolve_settings(recipe, _config(tmp_path), workload="snap")


def test_no_snapshot_driver_anywhere_says_where_to_set_one(tmp_path):
    recipe = load_recipe(_recipe(tmp_path))
    with pytest.raises(RecipeError, match=r"no snapshot driver for snap: pass --snapshot-driver ID"):
        resolve_settings(recipe, _config(tmp_path), workload="snap", controller="ctl")


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        (
            "coldsnap: {controller: 'ctl {nope}', snapshot_driver: n580}",
            r"snap.yaml:\d+: coldsnap.controller uses the unknown placeholder \{nope\}",
        ),
        (
            "coldsnap: {controller: 'ctl \"open', snapshot_driver: n580}",
            r"coldsnap.controller is not a valid command line",
        ),
        ("coldsnap: {controller: '', snapshot_driver: n580}", r"coldsnap.controller is ''; it must be a command line"),
        (
            "coldsnap: {controller: ctl, snapshot_driver: '../etc'}",
            r"coldsnap.snapshot_driver is '../etc'; it must be 1 to 128 letters",
        ),
        (
            "coldsnap: {controller: ctl, snapshot_driver: n580, policy: {cancel_grace_seconds: 301}}",
            r"cancel_grace_seconds is 301; it must be seconds in \(0, 300\]",
        ),
        (
            "coldsnap: {controller: ctl, snapshot_driver: n580, policy: {cancel_grace_seconds: .nan}}",
            r"policy values are scalars|cancel_grace_seconds is nan",
        ),
        (
            "coldsnap: {controller: ctl, snapshot_driver: n580, policy: [1]}",
            r"coldsnap.policy must be a mapping, not list",
        ),
        (
            "coldsnap: {controller: ctl, snapshot_driver: n580, artifact: {provider: s3}}",
            r"coldsnap.artifact is .*; it must be a path, or a mapping with provider and uri",
        ),
        (
            "coldsnap: {controller: ctl, snapshot_driver: n580, model: {revison: x}}",
            r"coldsnap.model is .*; it takes revision and source",
        ),
    ],
    ids=["placeholder", "quote", "empty", "driver", "grace", "nan", "policy", "artifact", "model"],
)
def test_bad_recipe_settings_name_the_file_line_and_field(tmp_path, section, problem):
    recipe = load_recipe(_recipe(tmp_path, section + "\n"))
    with pytest.raises(RecipeError, match=problem):
        resolve_settings(recipe, _config(tmp_path), workload="snap")


def test_an_unknown_field_of_the_section_is_refused_when_the_recipe_loads(tmp_path):
    with pytest.raises(
        RecipeError, match=r"snap.yaml:13: unknown field coldsnap.snapshot_drivr; did you mean 'snapshot_driver'\?"
    ):
        load_recipe(_recipe(tmp_path, "coldsnap:\n  controller: ctl\n  snapshot_drivr: n580\n"))


def test_bad_command_line_values_name_the_option(tmp_path):
    recipe = load_recipe(_recipe(tmp_path, SECTION))
    with pytest.raises(ValueError, match=r"--snapshot-driver is 'a b'; it must be"):
        resolve_settings(recipe, _config(tmp_path), workload="snap", snapshot_driver="a b")
    with pytest.raises(
        ValueError, match=r"--controller is 'x' \* 5000|--controller is 5000 characters long; the limit is 4096"
    ):
        resolve_settings(recipe, _config(tmp_path), workload="snap", controller="x" * 5000)


def _request(tmp_path: Path, operation: str = "restore") -> dict:
    recipe = load_recipe(_recipe(tmp_path, SECTION))
    settings = resolve_settings(recipe, _config(tmp_path), workload="snap")
    return build_request(operation, Target("snap", recipe), settings)


def test_the_request_has_one_unit_and_worker_per_host_with_its_rendered_command(tmp_path):
    request = _request(tmp_path)
    assert request["format"] == 4 and request["kind"] == "coldsnap-operation-request"
    assert request["id"] == "snap-restore" and request["operation"] == "restore"
    assert request["snapshot_driver"] == {"id": "n580"}
    units = request["launch"]["units"]
    assert [(u["id"], u["index"], u["host"], u["port"]) for u in units] == [
        ("unit-0", 0, "localhost", 18123),
        ("unit-1", 1, "127.0.0.2", 18123),
    ]
    assert units[0]["command"][-6:] == ["--host", "127.0.0.1", "--port", "18123", "--model", "tiny"]
    assert units[1]["command"][-5] == "127.0.0.2"
    assert units[0]["environment"] == {"TOKEN": "s3cret"}
    assert request["launch"]["execution"]["workers"][1] == {"id": "worker-1", "unit": "unit-1", "rank": 1}
    assert request["launch"]["model"] == {"id": "tiny", "revision": "main", "source": "example"}
    assert request["lifecycle"] == {"activation_state": "active"}
    assert request["artifact"]["provider"] == "file" and "output" not in request
    assert request["policy"] == {"cancel_grace_seconds": 30, "mode": "strict"}


def test_empty_fields_are_dropped_so_the_sent_text_is_what_is_hashed(tmp_path):
    request = _request(tmp_path, "status")
    unit = request["launch"]["units"][0]
    assert "devices" not in unit and "mounts" not in unit and "image" not in unit
    assert "lifecycle" not in request  # status wants no activation state
    sent = json.loads(request_text(request))
    assert (
        request_digest(request)
        == sha256_digest(sent)
        == "sha256:" + __import__("hashlib").sha256(canonical_json(sent)).hexdigest()
    )
    assert request_text(request).endswith("}\n") and '\n  "format": 4' in request_text(request)


def test_capture_writes_to_the_output_with_a_unique_id(tmp_path):
    first, second = _request(tmp_path, "capture"), _request(tmp_path, "capture")
    assert first["id"].startswith("snap-capture-") and len(first["id"]) == len("snap-capture-") + 12
    assert first["id"] != second["id"] and "artifact" not in first and first["output"]["provider"] == "file"
