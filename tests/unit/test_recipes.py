"""Recipe loading and validation: every error names the file, the line and the field."""

from __future__ import annotations

import json
import re
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkrun.core.recipes import find_recipe, load_recipe, recipe_dirs, render_command
from sparkrun.errors import RecipeError

GOOD = """\
recipe_version: "1"
name: chat
runtime: process
command: "{python} serve.py --port {port} --model {model}"
defaults:
  model: tiny
"""


def _write(tmp_path, text: str, name: str = "chat.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _raises(match: str):
    return pytest.raises(RecipeError, match=re.escape(match))


def test_a_valid_recipe_with_defaults(tmp_path):
    recipe = load_recipe(_write(tmp_path, GOOD))
    assert recipe.name == "chat" and recipe.hosts == ("localhost",) and recipe.port is None
    assert recipe.readiness.http_path is None and recipe.readiness.timeout == 60.0
    assert render_command(recipe, {"port": 8000}) == f"{sys.executable} serve.py --port 8000 --model tiny"
    assert render_command(recipe, {"port": 1, "model": "big"}).endswith("--model big")


def test_malformed_yaml_names_the_line(tmp_path):
    path = _write(tmp_path, GOOD + "env: [unclosed\n")
    with pytest.raises(RecipeError, match=rf"^{re.escape(str(path))}:\d+: malformed YAML: "):
        load_recipe(path)


def test_unknown_field_names_file_line_and_suggests(tmp_path):
    path = _write(tmp_path, GOOD + "readyness:\n  timeout: 3\n")
    with _raises(f"{path}:7: unknown field 'readyness'; did you mean 'readiness'? (field=readyness)"):
        load_recipe(path)


def test_unknown_nested_field(tmp_path):
    path = _write(tmp_path, GOOD + "readiness:\n  http_path: /health\n  retries: 3\n")
    with _raises(f"{path}:9: unknown field readiness.retries; expected http_path, timeout (field=readiness.retries)"):
        load_recipe(path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('recipe_version: "2"', "recipe_version is '2'; this sparkrun reads version \"1\" (field=recipe_version)"),
        ("name: Chat Server", "name is 'Chat Server'; a name is 1 to 63 lowercase letters, digits"),
        ("runtime: docker", "runtime is 'docker'; supported: process (field=runtime)"),
        ("port: 70000", "port is 70000; it must be an integer from 1 to 65535 (field=port)"),
        ("port: true", "port is True; it must be an integer from 1 to 65535 (field=port)"),
        ("hosts: []", "hosts must be a non-empty list of host names, not [] (field=hosts)"),
        ("defaults: [1]", "defaults must be a mapping, not list (field=defaults)"),
        ("env:\n  A: [1]", "env.A must be a scalar, not list (field=env.A)"),
        ("command: ''", "command must be a non-empty string, not '' (field=command)"),
        ("command: 'run {unclosed'", "command is not a valid template"),
        (
            "readiness:\n  timeout: 0",
            "readiness.timeout is 0; it must be seconds in (0, 86400] (field=readiness.timeout)",
        ),
        ("readiness:\n  http_path: health", "readiness.http_path is 'health'; it must start with '/'"),
    ],
)
def test_invalid_fields(tmp_path, line, message):
    key = line.split(":")[0]
    kept = [row for row in GOOD.splitlines() if not row.startswith(key + ":") and not row.startswith("  model")]
    if key != "defaults":
        kept.append("defaults:\n  model: tiny")
    path = _write(tmp_path, "\n".join(kept) + "\n" + line + "\n")
    with pytest.raises(RecipeError, match=rf"^{re.escape(str(path))}:\d+: {re.escape(message)}"):
        load_recipe(path)


def test_missing_required_field(tmp_path):
    path = _write(tmp_path, 'recipe_version: "1"\nname: x\nruntime: process\n')
    with _raises(f"{path}: command is required (field=command)"):
        load_recipe(path)


def test_a_recipe_must_be_a_mapping(tmp_path):
    path = _write(tmp_path, "- a\n")
    with _raises(f"{path}: a recipe must be a mapping of fields, not list"):
        load_recipe(path)


def test_placeholder_without_value(tmp_path):
    path = _write(tmp_path, GOOD.replace("--model {model}", "--model {model} --dtype {dtype}"))
    with _raises(f"{path}:4: command placeholder {{dtype}} has no value; set it in defaults or with --set dtype=VALUE"):
        render_command(load_recipe(path), {"port": 1})


@pytest.mark.parametrize(
    "placeholder",
    [
        "{python:>99999999999}",
        "{python.__class__}",
        "{name[0]}",
        "{python!r}",
        "{python!s:>5}",
        "{}",
        "{0}",
        "{ name }",
    ],
)
def test_placeholders_must_be_plain_names(tmp_path, placeholder):
    path = _write(tmp_path, GOOD.replace("{python}", placeholder))
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    assert str(caught.value) == (
        f"{path}:4: command placeholder {placeholder!r} must be a plain name like {{model}} (letters, digits, '_'), "
        "without conversion or format spec; write {{ and }} for literal braces (field=command)"
    )


def test_a_long_bad_placeholder_is_quoted_short(tmp_path):
    path = _write(tmp_path, GOOD.replace("{python}", "{python:" + ">" * 10_000 + "}"))
    with pytest.raises(RecipeError) as caught:
        load_recipe(path)
    quoted = "'{python:" + ">" * 48 + "..."  # 60 characters
    assert str(caught.value) == (
        f"{path}:4: command placeholder {quoted} must be a plain name like {{model}} (letters, digits, '_'), "
        "without conversion or format spec; write {{ and }} for literal braces (field=command)"
    )


def test_literal_braces_and_underscored_names_still_work(tmp_path):
    text = GOOD.replace('"{python} serve.py', "\"{python} -c 'print({{1: 2}})' {_Max_len2}").replace(
        "  model: tiny", "  model: tiny\n  _Max_len2: 8"
    )
    recipe = load_recipe(_write(tmp_path, text))
    assert render_command(recipe, {"port": 1}).startswith(f"{sys.executable} -c 'print({{1: 2}})' 8 ")


def test_the_example_recipe_loads():
    from pathlib import Path

    for path in sorted(Path(__file__).parents[2].joinpath("examples", "recipes").glob("*.yaml")):
        assert load_recipe(path).placeholders()


def test_find_by_name_path_and_suggestion(tmp_path, monkeypatch):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    _write(first, GOOD, "chat.yaml")
    _write(second, GOOD.replace("name: chat", "name: chat-large"), "chat-large.yml")
    assert find_recipe("chat", [first, second]).path == (first / "chat.yaml").resolve()
    assert find_recipe("chat-large", [first, second]).name == "chat-large"
    assert find_recipe(str(first / "chat.yaml"), []).name == "chat"
    with _raises("unknown recipe (recipe='chta', searched"):
        find_recipe("chta", [first, second])
    with pytest.raises(RecipeError, match=r"did you mean chat-large, chat\?$"):
        find_recipe("chat-lrge", [first, second])
    with _raises("no recipe file at this path (recipe=nope/x.yaml)"):
        find_recipe("nope/x.yaml", [])


def test_recipe_dirs_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    dirs = recipe_dirs({"recipe_dirs": ["/srv/recipes", "~/more"]}, tmp_path / "config")
    assert dirs[:3] == [
        tmp_path / "recipes",
        tmp_path / "config" / "recipes",
        __import__("pathlib").Path("/srv/recipes"),
    ]
    with _raises("recipe_dirs in the configuration must be a list of directories, not 3"):
        recipe_dirs({"recipe_dirs": 3}, None)


_PLAIN = r"[A-Za-z_][A-Za-z0-9_]*"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(command=st.text(alphabet="{}!:.[]0aZ_ >rs", max_size=30))
def test_a_command_is_refused_or_fills_plain_names_only(tmp_path, command):
    path = _write(
        tmp_path, GOOD.replace('"{python} serve.py --port {port} --model {model}"', json.dumps(f"run {command}"))
    )
    try:
        recipe = load_recipe(path)
    except RecipeError as error:
        assert str(error).startswith(f"{path}:4: command ") and str(error).endswith(" (field=command)")
        return
    values = {name: f"<{name}>" for name in recipe.placeholders()}
    assert all(re.fullmatch(_PLAIN, name) for name in values)
    expected = re.sub(
        r"\{\{|\}\}|\{(" + _PLAIN + r"):?\}",
        lambda match: values[match.group(1)] if match.group(1) else match.group(0)[0],
        f"run {command}",
    )
    assert render_command(recipe, values) == expected
