"""Recipe and configuration files are read within bounds; every refusal is one exact line.

Loads that hung or exhausted memory before the fix (a FIFO, a symlink to
``/dev/zero``, a YAML alias bomb) run in a subprocess with a timeout and a
memory cap, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkrun.config import load_config
from sparkrun.core.recipes import find_recipe, load_recipe
from sparkrun.core.text_files import read_text_file
from sparkrun.errors import ConfigError, RecipeError

GOOD = 'recipe_version: "1"\nname: chat\nruntime: process\ncommand: "{python} serve.py"\n'

_CHILD = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
    from pathlib import Path
    from sparkrun.config import load_config
    from sparkrun.core.recipes import find_recipe, load_recipe
    from sparkrun.errors import SparkrunError
    try:
        exec(sys.argv[1], {"load_config": load_config, "find_recipe": find_recipe, "load_recipe": load_recipe,
                           "Path": Path, "path": sys.argv[2]})
    except SparkrunError as error:
        print(f"{type(error).__name__}: {error}")
    else:
        print("loaded")
    """
)


def _isolated(statement: str, path: Path) -> str:
    """What ``statement`` (with ``path`` bound) raises, run in a bounded subprocess."""
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, statement, str(path)], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.rstrip("\n")


def _exactly(error: type[Exception], message: str):
    return pytest.raises(error, match=f"^{re.escape(message)}$")


def _billion_laughs() -> str:
    """A 387-byte value standing for 9**9 (387 million) strings."""
    rows = ["&a0 [" + ",".join(["lol"] * 9) + "]"]
    rows += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    return "[" + ", ".join(rows) + "]"


def _doubling_chain() -> str:
    """62 aliases, under the alias limit, standing for 2**32 mappings."""
    rows = ["c0: &c0 {k: x, j: x}"]
    rows += [f"c{i}: &c{i} {{k: *c{i - 1}, j: *c{i - 1}}}" for i in range(1, 32)]
    return "\n".join(rows) + "\n"


# Regular files only


def test_a_fifo_found_by_name_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "chat.yaml")
    out = _isolated("find_recipe('chat', [Path(path)])", tmp_path)
    assert out == f"RecipeError: recipe is not a regular file (path={tmp_path / 'chat.yaml'}, a named pipe)"


def test_a_fifo_given_by_path_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "chat.yaml"
    os.mkfifo(fifo)
    assert _isolated("find_recipe(path, [])", fifo) == (
        f"RecipeError: recipe is not a regular file (path={fifo}, a named pipe)"
    )
    assert _isolated("load_recipe(path)", fifo) == (
        f"RecipeError: recipe is not a regular file (path={fifo}, a named pipe)"
    )


def test_a_symlink_to_dev_zero_is_refused(tmp_path):
    (tmp_path / "chat.yaml").symlink_to("/dev/zero")
    out = _isolated("find_recipe('chat', [Path(path)])", tmp_path)
    assert out == f"RecipeError: recipe is not a regular file (path={tmp_path / 'chat.yaml'}, a character device)"


def test_a_directory_is_refused(tmp_path):
    directory = tmp_path / "chat.yaml"
    directory.mkdir()
    with _exactly(RecipeError, f"recipe is not a regular file (path={directory}, a directory)"):
        find_recipe(str(directory), [])


def test_a_missing_recipe_path(tmp_path):
    with _exactly(RecipeError, f"cannot read recipe (path={tmp_path / 'gone.yaml'}, No such file or directory)"):
        load_recipe(tmp_path / "gone.yaml")


def test_a_fifo_as_configuration_file_is_refused(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    assert _isolated("load_config(path)", fifo) == (
        f"ConfigError: the configuration file is not a regular file (path={fifo}, a named pipe)"
    )


def test_a_configuration_symlink_to_dev_zero_is_refused(tmp_path):
    link = tmp_path / "config.yaml"
    link.symlink_to("/dev/zero")
    assert _isolated("load_config(path)", link) == (
        f"ConfigError: the configuration file is not a regular file (path={link}, a character device)"
    )


# Size and encoding


def test_a_recipe_over_one_mebibyte_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text(GOOD + "description: " + "x" * (1 << 20) + "\n")
    size = path.stat().st_size
    with _exactly(RecipeError, f"recipe is too large (path={path}, {size} bytes, limit 1048576 bytes)"):
        load_recipe(path)


def test_a_configuration_file_over_one_mebibyte_is_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("# " + "x" * (1 << 20) + "\n")
    size = path.stat().st_size
    with _exactly(ConfigError, f"the configuration file is too large (path={path}, {size} bytes, limit 1048576 bytes)"):
        load_config(path)


def test_reading_stops_at_the_limit():
    path = Path("/proc/self/status")  # a regular file whose size reads as 0
    with _exactly(RecipeError, f"status is too large (path={path}, more than 100 bytes, limit 100 bytes)"):
        read_text_file(path, what="status", limit=100, error=RecipeError)


def test_the_limit_itself_is_accepted(tmp_path):
    path = tmp_path / "ten.txt"
    path.write_bytes(b"0123456789")
    assert read_text_file(path, what="file", limit=10, error=RecipeError) == "0123456789"
    path.write_bytes(b"0123456789A")
    with _exactly(RecipeError, f"file is too large (path={path}, 11 bytes, limit 10 bytes)"):
        read_text_file(path, what="file", limit=10, error=RecipeError)


def test_a_recipe_that_is_not_utf8_names_the_byte(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(GOOD.encode() + b"description: caf\xe9\n")
    with _exactly(RecipeError, f"recipe is not UTF-8 text (path={path}, byte {len(GOOD) + 16})"):
        load_recipe(path)


def test_a_configuration_file_that_is_not_utf8_names_the_byte(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_bytes(b"state_dir: /tmp/\xff\n")
    with _exactly(ConfigError, f"the configuration file is not UTF-8 text (path={path}, byte 16)"):
        load_config(path)


# YAML bounds


def test_a_billion_laughs_in_a_recipe_is_refused(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(GOOD + f"hosts: {_billion_laughs()}\n")  # quoted in an error before the fix
    assert _isolated("load_recipe(path)", path) == (
        f"RecipeError: recipe has too many YAML nodes, counting what aliases stand for (path={path}, line 5, "
        "limit 100000)"
    )


def test_a_billion_laughs_in_a_configuration_file_is_refused(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(f"recipe_dirs: {_billion_laughs()}\n")
    assert _isolated("load_config(path)", path) == (
        "ConfigError: the configuration file has too many YAML nodes, counting what aliases stand for "
        f"(path={path}, line 1, limit 100000)"
    )


@pytest.mark.parametrize(("kind", "statement"), [("recipe", "load_recipe(path)"), ("config", "load_config(path)")])
def test_a_doubling_chain_under_the_alias_limit_is_refused(tmp_path, kind, statement):
    path = tmp_path / "chain.yaml"
    path.write_text(_doubling_chain())
    what, error = ("recipe", "RecipeError") if kind == "recipe" else ("the configuration file", "ConfigError")
    assert _isolated(statement, path) == (
        f"{error}: {what} has too many YAML nodes, counting what aliases stand for (path={path}, line 14, limit 100000)"
    )


def test_the_cli_prints_one_error_line_for_a_bomb(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(GOOD + f"hosts: {_billion_laughs()}\n")
    done = subprocess.run(
        [sys.executable, "-m", "sparkrun", "run", str(path), "--state-dir", str(tmp_path / "state")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"error: recipe has too many YAML nodes, counting what aliases stand for (path={path}, line 5, limit 100000)"
    )
    assert "Traceback" not in done.stderr


def test_65_aliases_are_refused(tmp_path):
    path = tmp_path / "aliases.yaml"
    path.write_text(GOOD + "defaults: &d {model: tiny}\nhosts: [" + ", ".join(["*d"] * 65) + "]\n")
    with _exactly(RecipeError, f"recipe uses too many YAML aliases (path={path}, line 6, limit 64)"):
        load_recipe(path)


def test_64_aliases_are_fine(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("base: &b /srv/recipes\nrecipe_dirs: [" + ", ".join(["*b"] * 64) + "]\n")
    assert load_config(path).get("recipe_dirs") == ["/srv/recipes"] * 64


def test_merge_keys_still_work(tmp_path):
    path = tmp_path / "chat.yaml"
    path.write_text(GOOD + "defaults: &env {A: '1'}\nenv:\n  <<: *env\n  B: '2'\n")
    assert dict(load_recipe(path).env) == {"A": "1", "B": "2"}


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text(GOOD + "defaults: &d {model: *d}\n")
    with _exactly(RecipeError, f"recipe has a YAML alias inside its own anchor (path={path}, line 5, alias *d)"):
        load_recipe(path)


def test_deep_nesting_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("recipe_dirs: " + "[" * 1000 + "]" * 1000 + "\n")
    with _exactly(ConfigError, f"the configuration file is nested too deeply (path={path}, line 1, limit 64 levels)"):
        load_config(path)


def test_too_many_nodes_without_aliases(tmp_path, monkeypatch):
    from sparkrun.core import yaml_files

    monkeypatch.setattr(yaml_files, "MAX_NODES", 50)  # 100,000 plain nodes take a while to parse
    path = tmp_path / "wide.yaml"
    path.write_text(GOOD + "hosts: [" + ",".join(["h"] * 50) + "]\n")
    with _exactly(
        RecipeError, f"recipe has too many YAML nodes, counting what aliases stand for (path={path}, line 5, limit 50)"
    ):
        load_recipe(path)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        (
            "port: " + "1" * 5000,
            "Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits; "
            "use sys.set_int_max_str_digits() to increase the limit",
        ),
        ("port: 2024-13-01", "month must be in 1..12"),
        ("description: a\x00b", "unacceptable character #x0000: special characters are not allowed"),
        ("---\nname: other", "expected a single document in the stream, but found another document"),
        ("hosts: *nowhere", "found undefined alias 'nowhere'"),
    ],
)
def test_unreadable_yaml_values_are_one_line(tmp_path, line, problem):
    path = tmp_path / "chat.yaml"
    path.write_text(GOOD + line + "\n")
    with _exactly(RecipeError, f"{path}:5: malformed YAML: {problem}"):
        load_recipe(path)


def test_a_long_yaml_problem_is_shortened(tmp_path):
    path = tmp_path / "chat.yaml"
    path.write_text(GOOD + "hosts: *" + "n" * 5000 + "\n")
    problem = "found undefined alias '" + "n" * 174 + "..."  # 200 characters
    with _exactly(RecipeError, f"{path}:5: malformed YAML: {problem}"):
        load_recipe(path)


_yaml_like = st.text(alphabet="[]{}:,-?&*!|>'\"#%@`\\\n\t ab01.~<=\x00\x85\u2028\ufeff", max_size=120)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_yaml_like)
def test_any_text_loads_or_is_a_config_error(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_config(path)
    except ConfigError as error:
        assert "\n" not in str(error)
