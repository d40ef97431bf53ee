"""Recipes: what to launch, read from YAML and validated with file and line.

A recipe names a workload (``runtime: process`` runs a command on the host),
the command template, its default values, environment, hosts, readiness
check and, optionally, the image and model the distribute phase handles,
and a ``coldsnap:`` section whose values the ColdSnap plugin checks.
Recipes are found by path or by name in the recipe directories.

Why one module of this size: every field's check sits next to the others,
each raising an error with the file, line and field, so the format and its
error messages read as one page. Loading YAML safely lives in
``yaml_files``, placeholders' values in ``render_command`` here.
"""

from __future__ import annotations

import difflib
import re
import string
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from sparkrun.core.names import NAME_RULE, is_name
from sparkrun.core.short_repr import short_repr, shorten
from sparkrun.errors import RecipeError

__all__ = [
    "COLDSNAP_FIELDS",
    "Readiness",
    "Recipe",
    "find_recipe",
    "load_recipe",
    "recipe_dirs",
    "render_command",
]

RECIPE_VERSION = "1"
RUNTIMES = ("process",)
_PLACEHOLDER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Unknown fields longer than this get no "did you mean" (difflib is quadratic).
_MAX_SUGGESTED_CHARS = 64
_FIELDS = (
    "recipe_version",
    "name",
    "description",
    "runtime",
    "command",
    "defaults",
    "env",
    "hosts",
    "port",
    "readiness",
    "image",
    "model",
    "coldsnap",
)
_READINESS_FIELDS = ("http_path", "timeout")
#: Fields of the ``coldsnap:`` section; the ColdSnap plugin checks their values.
COLDSNAP_FIELDS = ("controller", "snapshot_driver", "engine", "model", "artifact", "output", "policy")
#: Placeholders every command may use besides ``defaults`` and overrides.
BUILTIN_PLACEHOLDERS = ("name", "host", "port", "python", "recipe_dir")


@dataclass(frozen=True)
class Readiness:
    """Ready means: the port accepts connections, then ``http_path`` (if any) answers 2xx."""

    http_path: str | None = None
    timeout: float = 60.0


@dataclass(frozen=True)
class Recipe:
    name: str
    command: str
    path: Path
    runtime: str = "process"
    description: str = ""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    hosts: tuple[str, ...] = ("localhost",)
    port: int | None = None
    readiness: Readiness = field(default_factory=Readiness)
    image: str | None = None
    model: str | None = None
    #: The ``coldsnap:`` section as written (known fields only); ``sparkrun.plugins.coldsnap`` reads it.
    coldsnap: Mapping[str, Any] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict, repr=False, compare=False)

    def error(self, field_path: str, problem: str) -> RecipeError:
        """An error naming this recipe's file, the line of ``field_path`` and the field."""
        return _Located(self.path, self.lines).error(field_path, problem)

    def placeholders(self) -> list[str]:
        """Names used as ``{placeholder}`` in the command template."""
        return [name for _, name, _, _ in string.Formatter().parse(self.command) if name]


class _Located:
    """Raises errors that point at the file and line of a field."""

    def __init__(self, path: Path, lines: Mapping[str, int]) -> None:
        self.path, self.lines = path, lines

    def error(self, field_path: str, problem: str) -> RecipeError:
        parts = field_path.split(".")
        # the deepest recorded level: coldsnap.policy.x points at the line of coldsnap.policy
        line = next(
            (self.lines[k] for k in (".".join(parts[:n]) for n in range(len(parts), 0, -1)) if k in self.lines), None
        )
        where = f"{self.path}:{line}" if line else str(self.path)
        return RecipeError(f"{where}: {problem} (field={shorten(field_path)})")


def _line_map(node: Any) -> dict[str, int]:
    """Lines of the keys of the top two levels: every recipe field lives there.

    Deeper levels are not walked, so aliased structures cost nothing here.
    """
    import yaml

    lines: dict[str, int] = {}
    if not isinstance(node, yaml.MappingNode):
        return lines
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            continue
        lines[key_node.value] = key_node.start_mark.line + 1
        if isinstance(value_node, yaml.MappingNode):
            for sub_key, _ in value_node.value:
                if isinstance(sub_key, yaml.ScalarNode):
                    lines[f"{key_node.value}.{sub_key.value}"] = sub_key.start_mark.line + 1
    return lines


def _parse(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    from sparkrun.core.yaml_files import load_yaml_file

    data, node = load_yaml_file(path, what="recipe", error=RecipeError)
    if not isinstance(data, dict):
        raise RecipeError(f"{path}: a recipe must be a mapping of fields, not {type(data).__name__}")
    return data, _line_map(node)


def _check_placeholders(where: _Located, command: str) -> None:
    """Placeholders are plain names: no attribute or index lookups, conversions or format specs."""
    try:
        parsed = list(string.Formatter().parse(command))
    except ValueError as error:
        raise where.error("command", f"command is not a valid template: {error}") from None
    for _, name, spec, conversion in parsed:
        if name is None or (_PLACEHOLDER.fullmatch(name) and not spec and conversion is None):
            continue
        text = "{" + name + (f"!{conversion}" if conversion else "") + (f":{spec}" if spec else "") + "}"
        raise where.error(
            "command",
            f"command placeholder {short_repr(text)} must be a plain name like {{model}} (letters, digits, '_'), "
            "without conversion or format spec; write {{ and }} for literal braces",
        )


@overload
def _text(where: _Located, data: Mapping[str, Any], key: str, *, required: Literal[True]) -> str: ...


@overload
def _text(where: _Located, data: Mapping[str, Any], key: str, *, required: bool = False) -> str | None: ...


def _text(where: _Located, data: Mapping[str, Any], key: str, *, required: bool = False) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise where.error(key, f"{key} is required")
        return None
    if not isinstance(value, str) or not value.strip():
        raise where.error(key, f"{key} must be a non-empty string, not {short_repr(value)}")
    return value


#: Where the value of each built-in placeholder comes from, for a recipe that tries to set it in ``defaults``.
_BUILTIN_SOURCES = {
    "name": "the deployment name: the recipe's name field, or --name",
    "host": "the address the workload binds on its host, which sparkrun fills",
    "port": "the listening port: the recipe's port field, or --port",
    "python": "the Python that runs sparkrun; use a placeholder of your own for another interpreter",
    "recipe_dir": "the recipe's folder, which sparkrun fills",
}


def _defaults(where: _Located, data: Mapping[str, Any]) -> dict[str, Any]:
    defaults = _mapping(where, data, "defaults")
    for key in defaults:
        if key in _BUILTIN_SOURCES:
            raise where.error(f"defaults.{key}", f"defaults.{key} cannot be set: {{{key}}} is {_BUILTIN_SOURCES[key]}")
    return defaults


def _mapping(where: _Located, data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        raise where.error(key, f"{key} must be a mapping, not {type(value).__name__}")
    for item_key, item in value.items():
        if not isinstance(item_key, str):
            raise where.error(key, f"{key} keys must be strings, not {short_repr(item_key)}")
        if isinstance(item, (dict, list)):
            raise where.error(
                f"{key}.{item_key}", f"{key}.{shorten(item_key)} must be a scalar, not {type(item).__name__}"
            )
    return value


def _port(where: _Located, value: Any, field_path: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise where.error(field_path, f"{field_path} is {short_repr(value)}; it must be an integer from 1 to 65535")
    return value


def _readiness(where: _Located, data: Mapping[str, Any]) -> Readiness:
    raw = data.get("readiness") or {}
    if not isinstance(raw, dict):
        raise where.error("readiness", f"readiness must be a mapping, not {type(raw).__name__}")
    for key in raw:
        if key not in _READINESS_FIELDS:
            raise where.error(
                f"readiness.{key}",
                f"unknown field readiness.{shorten(str(key))}; expected {', '.join(_READINESS_FIELDS)}",
            )
    path = raw.get("http_path")
    if path is not None and (not isinstance(path, str) or not path.startswith("/")):
        raise where.error("readiness.http_path", f"readiness.http_path is {short_repr(path)}; it must start with '/'")
    timeout = raw.get("timeout", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 86_400:
        raise where.error(
            "readiness.timeout", f"readiness.timeout is {short_repr(timeout)}; it must be seconds in (0, 86400]"
        )
    return Readiness(http_path=path, timeout=float(timeout))


def _coldsnap(where: _Located, data: Mapping[str, Any]) -> dict[str, Any]:
    section = data.get("coldsnap") or {}
    if not isinstance(section, dict):
        raise where.error("coldsnap", f"coldsnap must be a mapping, not {type(section).__name__}")
    for key in section:
        if key not in COLDSNAP_FIELDS:
            close = (
                difflib.get_close_matches(str(key), COLDSNAP_FIELDS, n=1)
                if len(str(key)) <= _MAX_SUGGESTED_CHARS
                else []
            )
            hint = f"; did you mean {close[0]!r}?" if close else f"; expected {', '.join(COLDSNAP_FIELDS)}"
            raise where.error(f"coldsnap.{key}", f"unknown field coldsnap.{shorten(str(key))}{hint}")
    return section


def _hosts(where: _Located, data: Mapping[str, Any]) -> tuple[str, ...]:
    hosts = data.get("hosts", ["localhost"])
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h.strip() for h in hosts):
        raise where.error("hosts", f"hosts must be a non-empty list of host names, not {short_repr(hosts)}")
    return tuple(hosts)


def load_recipe(path: Path | str) -> Recipe:
    """Read and validate one recipe file; errors name the file, line and field."""
    path = Path(path)
    data, lines = _parse(path)
    where = _Located(path, lines)
    for key in data:
        if key not in _FIELDS:
            text = str(key)
            close = difflib.get_close_matches(text, _FIELDS, n=1) if len(text) <= _MAX_SUGGESTED_CHARS else []
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise where.error(text, f"unknown field {short_repr(key)}{hint}")
    version = data.get("recipe_version")
    if version != RECIPE_VERSION and not (type(version) is int and version == 1):
        raise where.error("recipe_version", f'recipe_version is {short_repr(version)}; this sparkrun reads version "1"')
    name = _text(where, data, "name", required=True)
    if not is_name(name):
        raise where.error("name", f"name is {short_repr(name)}; a name is {NAME_RULE}")
    runtime = _text(where, data, "runtime", required=True)
    if runtime not in RUNTIMES:
        raise where.error("runtime", f"runtime is {short_repr(runtime)}; supported: {', '.join(RUNTIMES)}")
    command = _text(where, data, "command", required=True)
    _check_placeholders(where, command)
    return Recipe(
        name=name,
        command=command,
        path=path.resolve(),
        runtime=runtime,
        description=_text(where, data, "description") or "",
        defaults=_defaults(where, data),
        env={key: str(value) for key, value in _mapping(where, data, "env").items()},
        hosts=_hosts(where, data),
        port=_port(where, data.get("port"), "port"),
        readiness=_readiness(where, data),
        image=_text(where, data, "image"),
        model=_text(where, data, "model"),
        coldsnap=_coldsnap(where, data),
        lines=lines,
    )


def recipe_dirs(config_values: Mapping[str, Any], config_dir: Path | None) -> list[Path]:
    """Where recipes are looked up by name: ``./recipes``, the config dir's, then ``recipe_dirs``."""
    dirs = [Path.cwd() / "recipes"]
    if config_dir is not None:
        dirs.append(config_dir / "recipes")
    extra = config_values.get("recipe_dirs") or []
    if isinstance(extra, str):
        extra = [extra]
    if not isinstance(extra, list):
        raise RecipeError(f"recipe_dirs in the configuration must be a list of directories, not {short_repr(extra)}")
    dirs.extend(Path(str(item)).expanduser() for item in extra)
    return list(dict.fromkeys(dirs))  # the same directory once, first position kept


def _files_in(directories: Sequence[Path]) -> list[Path]:
    found: list[Path] = []
    for directory in directories:
        if directory.is_dir():
            found.extend(sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")]))
    return found


def find_recipe(reference: str, directories: Sequence[Path]) -> Recipe:
    """A recipe by path (anything with a slash or a YAML suffix) or by name.

    A name is a file's name without its suffix, else the ``name`` field of a
    recipe in the directories (read only when no file name matches; recipes
    that cannot be read are passed over here and reported when named).
    """
    as_path = Path(reference).expanduser()
    if "/" in reference or as_path.suffix in (".yaml", ".yml"):
        if not as_path.exists():
            raise RecipeError(f"no recipe file at this path (recipe={reference})")
        return load_recipe(as_path)
    files = _files_in(directories)
    by_stem = {path.stem: path for path in reversed(files)}  # the first directory wins
    if reference in by_stem:
        return load_recipe(by_stem[reference])
    known = list(by_stem)
    for path in files:
        try:
            recipe = load_recipe(path)
        except RecipeError:
            continue
        if recipe.name == reference:
            return recipe
        known.append(recipe.name)
    close = difflib.get_close_matches(reference, list(dict.fromkeys(known)), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    searched = ", ".join(str(d) for d in directories)
    raise RecipeError(f"unknown recipe (recipe={reference!r}, searched {searched}){hint}")


def render_command(recipe: Recipe, values: Mapping[str, Any]) -> str:
    """Fill the command template; a placeholder without a value is an error naming it."""
    merged = {
        **recipe.defaults,
        "name": recipe.name,
        "python": sys.executable,
        "recipe_dir": str(recipe.path.parent),
        **values,
    }
    missing = [name for name in recipe.placeholders() if name not in merged]
    if missing:
        line = recipe.lines.get("command")
        where = f"{recipe.path}:{line}" if line else str(recipe.path)
        name = shorten(missing[0])
        raise RecipeError(
            f"{where}: command placeholder {{{name}}} has no value; "
            f"set it in defaults or with --set {name}=VALUE (field=command)"
        )
    return recipe.command.format_map(merged)
