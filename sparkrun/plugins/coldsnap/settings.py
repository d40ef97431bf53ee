"""Which controller to run and with what: the recipe's ``coldsnap:`` section, the config, the command line.

Precedence for each setting: the command line (``--controller``,
``--snapshot-driver``), then the recipe's ``coldsnap:`` section, then the
configuration file's ``coldsnap:`` mapping. Errors name the recipe file and
line, or the option, the value and what it must be.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrun.config import Config
from sparkrun.core.recipes import Recipe
from sparkrun.core.short_repr import short_repr
from sparkrun.errors import ConfigError, RecipeError

__all__ = [
    "DEFAULT_CANCEL_GRACE_SECONDS",
    "MAX_CANCEL_GRACE_SECONDS",
    "ColdSnapSettings",
    "Location",
    "resolve_settings",
]

#: The contract lets a controller clean up for up to 300 s after SIGTERM.
MAX_CANCEL_GRACE_SECONDS = 300.0
DEFAULT_CANCEL_GRACE_SECONDS = MAX_CANCEL_GRACE_SECONDS
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")  # names only: JSON in an argument is left alone
_MAX_COMMAND_CHARS = 4096


@dataclass(frozen=True)
class Location:
    """Where a snapshot lives: ``provider`` (``file`` for a local path) and ``uri``."""

    provider: str
    uri: str

    def to_json(self) -> dict[str, str]:
        return {"provider": self.provider, "uri": self.uri}


@dataclass(frozen=True)
class ColdSnapSettings:
    """Everything the request and the controller run need beyond the recipe itself."""

    controller: tuple[str, ...]
    snapshot_driver: str
    engine: str
    artifact: Location
    output: Location
    model_revision: str | None = None
    model_source: str | None = None
    policy: Mapping[str, Any] = field(default_factory=dict)
    cancel_grace_seconds: float = DEFAULT_CANCEL_GRACE_SECONDS


def _controller_argv(text: Any, *, where: str, placeholders: Mapping[str, str]) -> tuple[str, ...]:
    """Split a controller command like a shell would and fill ``{python}``-style placeholders per word."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where} is {short_repr(text)}; it must be a command line such as 'coldsnap-controller'")
    if len(text) > _MAX_COMMAND_CHARS:
        raise ValueError(f"{where} is {len(text)} characters long; the limit is {_MAX_COMMAND_CHARS}")
    try:
        words = shlex.split(text)
    except ValueError as error:
        raise ValueError(f"{where} is not a valid command line ({error}): {short_repr(text)}") from None

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in placeholders:
            known = ", ".join("{" + key + "}" for key in placeholders)
            raise ValueError(f"{where} uses the unknown placeholder {{{short_repr(name)[1:-1]}}}; known: {known}")
        return placeholders[name]

    return tuple(_PLACEHOLDER.sub(fill, word) for word in words)


def _safe_id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _SAFE_ID.fullmatch(value):
        raise ValueError(
            f"{where} is {short_repr(value)}; it must be 1 to 128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )
    return value


def _location(value: Any, where: str, base: Path) -> Location:
    """A path (``file`` provider; a relative one under ``base``) or a mapping ``{provider, uri}``."""
    if isinstance(value, str) and value.strip():
        return Location("file", str((base / Path(value).expanduser()).resolve()))
    if isinstance(value, dict) and set(value) == {"provider", "uri"}:
        provider, uri = value["provider"], value["uri"]
        _safe_id(provider, f"{where}.provider")
        if not isinstance(uri, str) or not uri.strip() or len(uri) > _MAX_COMMAND_CHARS:
            raise ValueError(f"{where}.uri is {short_repr(uri)}; it must be a non-empty string")
        if provider == "file":
            uri = str((base / Path(uri).expanduser()).resolve())
        return Location(provider, uri)
    raise ValueError(f"{where} is {short_repr(value)}; it must be a path, or a mapping with provider and uri")


def _policy(value: Any, where: str) -> tuple[dict[str, Any], float]:
    if value is None:
        return {}, DEFAULT_CANCEL_GRACE_SECONDS
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be a mapping, not {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not _SAFE_ID.fullmatch(key):
            raise ValueError(f"{where} has the key {short_repr(key)}; keys are plain names")
        if isinstance(item, (dict, list)) or (isinstance(item, float) and item != item):
            raise ValueError(f"{where}.{key} is {short_repr(item)}; policy values are scalars")
    grace = value.get("cancel_grace_seconds", DEFAULT_CANCEL_GRACE_SECONDS)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not 0 < grace <= MAX_CANCEL_GRACE_SECONDS:
        raise ValueError(
            f"{where}.cancel_grace_seconds is {short_repr(grace)}; "
            f"it must be seconds in (0, {MAX_CANCEL_GRACE_SECONDS:g}]"
        )
    return dict(value), float(grace)


def _text(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 512:
        raise ValueError(f"{where} is {short_repr(value)}; it must be a non-empty string of at most 512 characters")
    return value


def _config_section(config: Config) -> Mapping[str, Any]:
    section = config.get("coldsnap") or {}
    if not isinstance(section, dict):
        raise ConfigError(f"coldsnap in the configuration file must be a mapping (path={config.path})")
    return section


def _model(recipe: Recipe) -> tuple[str | None, str | None]:
    model = recipe.coldsnap.get("model")
    if model is None:
        return None, None
    if not isinstance(model, dict) or not set(model) <= {"revision", "source"}:
        raise recipe.error("coldsnap.model", f"coldsnap.model is {short_repr(model)}; it takes revision and source")
    try:
        return _text(model.get("revision"), "coldsnap.model.revision"), _text(
            model.get("source"), "coldsnap.model.source"
        )
    except ValueError as error:
        raise recipe.error("coldsnap.model", str(error)) from None


def resolve_settings(
    recipe: Recipe,
    config: Config,
    *,
    workload: str,
    controller: str | None = None,
    snapshot_driver: str | None = None,
) -> ColdSnapSettings:
    """The settings of one ColdSnap operation on ``workload`` (a recipe or deployment name)."""
    section, configured = recipe.coldsnap, _config_section(config)
    recipe_dir = recipe.path.parent
    if controller is not None:
        argv = _controller_argv(
            controller, where="--controller", placeholders={"python": sys.executable, "recipe_dir": str(recipe_dir)}
        )
    elif section.get("controller") is not None:
        try:
            argv = _controller_argv(
                section["controller"],
                where="coldsnap.controller",
                placeholders={"python": sys.executable, "recipe_dir": str(recipe_dir)},
            )
        except ValueError as error:
            raise recipe.error("coldsnap.controller", str(error)) from None
    elif configured.get("controller") is not None:
        try:
            argv = _controller_argv(
                configured["controller"], where="coldsnap.controller", placeholders={"python": sys.executable}
            )
        except ValueError as error:
            raise ConfigError(f"{error} (path={config.path})") from None
    else:
        raise ConfigError(
            f"no ColdSnap controller for {workload}: pass --controller CMD, or set coldsnap.controller "
            f"in the recipe ({recipe.path}) or in the configuration file"
        )
    if snapshot_driver is not None:
        driver = _safe_id(snapshot_driver, "--snapshot-driver")
    else:
        raw = section.get("snapshot_driver", configured.get("snapshot_driver"))
        if raw is None:
            raise RecipeError(
                f"no snapshot driver for {workload}: pass --snapshot-driver ID (such as n580), or set "
                f"coldsnap.snapshot_driver in the recipe ({recipe.path}) or in the configuration file"
            )
        try:
            driver = _safe_id(raw, "coldsnap.snapshot_driver")
        except ValueError as error:
            raise recipe.error("coldsnap.snapshot_driver", str(error)) from None
    try:
        engine = _text(section.get("engine"), "coldsnap.engine") or recipe.runtime
    except ValueError as error:
        raise recipe.error("coldsnap.engine", str(error)) from None
    # Relative paths are sparkrun's state, never the recipe's folder: a capture must not write into a checkout.
    base = config.state_dir / "coldsnap"
    default = base / "artifacts" / workload
    locations: dict[str, Location] = {}
    for key in ("artifact", "output"):
        raw = section.get(key)
        try:
            locations[key] = _location(raw, f"coldsnap.{key}", base) if raw is not None else Location("", "")
        except ValueError as error:
            raise recipe.error(f"coldsnap.{key}", str(error)) from None
    artifact = locations["artifact"] if locations["artifact"].uri else Location("file", str(default.resolve()))
    output = locations["output"] if locations["output"].uri else artifact  # capture writes what restore reads
    try:
        policy, grace = _policy(section.get("policy"), "coldsnap.policy")
    except ValueError as error:
        raise recipe.error("coldsnap.policy", str(error)) from None
    revision, source = _model(recipe)
    return ColdSnapSettings(
        controller=argv,
        snapshot_driver=driver,
        engine=engine,
        artifact=artifact,
        output=output,
        model_revision=revision,
        model_source=source,
        policy=policy,
        cancel_grace_seconds=grace,
    )
