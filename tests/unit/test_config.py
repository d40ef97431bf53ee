"""Configuration file and state directory resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkrun.application import initialize
from sparkrun.config import load_config
from sparkrun.errors import ConfigError


def test_defaults_follow_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = load_config()
    assert config.state_dir == tmp_path / "state" / "sparkrun" and config.path is None


def test_state_dir_precedence(monkeypatch, tmp_path):
    file = tmp_path / "config.yaml"
    file.write_text("state_dir: /from/file\n")
    assert load_config(file).state_dir == Path("/from/file")
    monkeypatch.setenv("SPARKRUN_STATE_DIR", str(tmp_path / "env"))
    assert load_config(file).state_dir == tmp_path / "env"
    assert load_config(file, state_dir=tmp_path / "arg").state_dir == tmp_path / "arg"


def test_values_are_read(tmp_path):
    file = tmp_path / "config.yaml"
    file.write_text("journal:\n  max_events: 10\n")
    assert load_config(file).get("journal") == {"max_events": 10}


def test_missing_explicit_file(tmp_path):
    with pytest.raises(ConfigError, match=r"the configuration file does not exist \(path=.*nope.yaml\)"):
        load_config(tmp_path / "nope.yaml")


def test_invalid_yaml_names_the_line(tmp_path):
    file = tmp_path / "config.yaml"
    file.write_text("a: 1\nb: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_config(file)
    assert (
        str(caught.value)
        == f"{file}:3: malformed YAML: while parsing a flow sequence, expected ',' or ']', but got '<stream end>'"
    )


def test_non_mapping_file(tmp_path):
    file = tmp_path / "config.yaml"
    file.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match=r"must hold a mapping \(path=.*, found list\)"):
        load_config(file)


def test_initialize_returns_a_context(tmp_path):
    sctx = initialize(state_dir=tmp_path)
    assert sctx.config.state_dir == tmp_path and sctx.events is None and sctx.operation is None
