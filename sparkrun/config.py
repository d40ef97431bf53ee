"""Where sparkrun keeps state and reads its configuration file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparkrun.errors import ConfigError

__all__ = [
    "Config",
    "default_config_path",
    "default_state_dir",
    "env_flag",
    "load_config",
    "otlp_endpoint",
    "xdg_location",
]

_ON = ("1", "true", "t", "yes", "y", "on")
_OFF = ("0", "false", "f", "no", "n", "off")


def env_flag(value: str | None, *, default: bool) -> bool:
    """An on/off environment value (the spellings click accepts); unset, blank or unknown gives ``default``."""
    text = (value or "").strip().lower()
    if text in _ON:
        return True
    if text in _OFF:
        return False
    return default


def otlp_endpoint(env: Mapping[str, str], signal: str = "TRACES") -> str | None:
    """The OTLP endpoint for ``signal``: the per-signal variable, else ``OTEL_EXPORTER_OTLP_ENDPOINT``."""
    return env.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None


def xdg_location(explicit: str, xdg: str, fallback: str, *tail: str) -> Path:
    """``$explicit`` if set, else ``$xdg/<tail>``, else ``~/<fallback>/<tail>``: the XDG base directory rule."""
    chosen = os.environ.get(explicit)
    if chosen:
        return Path(chosen).expanduser()
    base = os.environ.get(xdg)
    return (Path(base).expanduser() if base else Path.home() / fallback).joinpath(*tail)


def default_state_dir() -> Path:
    """``SPARKRUN_STATE_DIR``, else ``$XDG_STATE_HOME/sparkrun``, else ``~/.local/state/sparkrun``."""
    return xdg_location("SPARKRUN_STATE_DIR", "XDG_STATE_HOME", ".local/state", "sparkrun")


def default_config_path() -> Path:
    """``SPARKRUN_CONFIG``, else ``$XDG_CONFIG_HOME/sparkrun/config.yaml``."""
    return xdg_location("SPARKRUN_CONFIG", "XDG_CONFIG_HOME", ".config", "sparkrun", "config.yaml")


@dataclass(frozen=True)
class Config:
    """Resolved configuration: the state directory and the file's settings."""

    state_dir: Path
    path: Path | None = None
    values: Mapping[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        """A top-level setting of the configuration file."""
        return self.values.get(key, default)


def _read_yaml(path: Path) -> Mapping[str, Any]:
    from sparkrun.core.yaml_files import load_yaml_file

    loaded, _ = load_yaml_file(path, what="the configuration file", error=ConfigError)
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"the configuration file must hold a mapping (path={path}, found {type(loaded).__name__})")
    return loaded


def load_config(path: Path | str | None = None, *, state_dir: Path | str | None = None) -> Config:
    """Read the configuration file (if it exists) and resolve the state directory.

    Precedence for the state directory: the ``state_dir`` argument, then
    ``SPARKRUN_STATE_DIR``, then ``state_dir`` in the file, then the XDG default.
    A missing default file is fine; a missing file that was asked for is an error.
    """
    config_path = Path(path).expanduser() if path is not None else default_config_path()
    found: Path | None = config_path
    if config_path.exists():
        values = _read_yaml(config_path)
    elif path is not None:
        raise ConfigError(f"the configuration file does not exist (path={config_path})")
    else:
        values, found = {}, None
    if state_dir is not None:
        resolved = Path(state_dir).expanduser()
    elif os.environ.get("SPARKRUN_STATE_DIR") or "state_dir" not in values:
        resolved = default_state_dir()
    else:
        resolved = Path(str(values["state_dir"])).expanduser()
    return Config(state_dir=resolved, path=found, values=values)
