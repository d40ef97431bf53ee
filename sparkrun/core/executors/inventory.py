"""The host inventory: how a host name in a recipe becomes an SSH destination.

The configuration file's ``hosts:`` mapping adds, per host name, what the
user's own ``~/.ssh/config`` may not say: the address, user, port, key and
known_hosts file, and the interpreter that ``{python}`` means there. Every
field is optional and a name that is not listed goes to ssh as it is, so an
alias of ``~/.ssh/config`` works unchanged. Everything that reaches the ssh
command line is checked here: a value starting with ``-`` would be read as
an option.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparkrun.core.short_repr import short_repr
from sparkrun.errors import ConfigError

__all__ = ["HostEntry", "SshOptions", "check_host_name", "host_entry", "read_inventory", "read_ssh_options"]

_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,252}")
_ADDRESS = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._:-]{0,252}|\[[0-9A-Fa-f:.]+\]")
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
_FIELDS = ("address", "user", "port", "identity_file", "known_hosts_file", "python")


@dataclass(frozen=True)
class HostEntry:
    """One host as ssh reaches it; ``None`` fields are left to the user's ssh configuration."""

    name: str
    address: str | None = None
    user: str | None = None
    port: int | None = None
    identity_file: str | None = None
    known_hosts_file: str | None = None
    python: str = "python3"

    @property
    def destination(self) -> str:
        """The address the workload binds on that host: the inventory address, else the name."""
        return (self.address or self.name).strip("[]")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> HostEntry:
        """A recorded entry (from a deployment record), checked like a configured one."""
        if not isinstance(data, Mapping) or not isinstance(data.get("name"), str):
            raise ConfigError(f"a recorded host is unreadable ({short_repr(data)})")
        values = {key: value for key, value in data.items() if key != "name" and value is not None}
        return host_entry(data["name"], values, where="recorded host")


@dataclass(frozen=True)
class SshOptions:
    """How connections are made: reuse (seconds a master stays up idle), connect timeout, fan-out bound."""

    control_persist: int = 120
    connect_timeout: int = 10
    parallel: int = 8


def _check(where: str, field: str, value: Any, pattern: re.Pattern[str], what: str) -> str:
    if not isinstance(value, str) or pattern.fullmatch(value) is None:
        raise ConfigError(f"{where}.{field} is {short_repr(value)}; it must be {what}")
    return value


def _path(where: str, field: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\0" in value:
        raise ConfigError(f"{where}.{field} is {short_repr(value)}; it must be a file path")
    return str(Path(value).expanduser())


def _integer(where: str, field: str, value: Any, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise ConfigError(f"{where}.{field} is {short_repr(value)}; it must be an integer from {low} to {high}")
    return value


def check_host_name(name: Any, *, field: str = "host") -> str:
    """A host name as recipes and the inventory give it; never something ssh would read as an option."""
    if not isinstance(name, str) or _HOST.fullmatch(name) is None:
        raise ConfigError(f"{field}: {short_repr(name)} is not a host name (letters, digits, '.', '_', '-')")
    return name


def host_entry(name: str, values: Mapping[str, Any], *, where: str | None = None) -> HostEntry:
    """Check one inventory entry; an error names the field, the value and the rule."""
    where = where or f"hosts.{name}"
    check_host_name(name, field="hosts")
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(_FIELDS)})")
    entry: dict[str, Any] = {}
    if "address" in values:
        entry["address"] = _check(where, "address", values["address"], _ADDRESS, "a host name or an IP address")
    if "user" in values:
        entry["user"] = _check(where, "user", values["user"], _USER, "a user name (letters, digits, '.', '_', '-')")
    if "port" in values:
        entry["port"] = _integer(where, "port", values["port"], 1, 65535)
    for field in ("identity_file", "known_hosts_file"):
        if field in values:
            entry[field] = _path(where, field, values[field])
    if "python" in values:
        entry["python"] = _path(where, "python", values["python"])
    return HostEntry(name, **entry)


def read_inventory(config_values: Mapping[str, Any]) -> dict[str, HostEntry]:
    """The ``hosts:`` mapping of the configuration file, checked."""
    hosts = config_values.get("hosts")
    if hosts is None:
        return {}
    if not isinstance(hosts, Mapping):
        raise ConfigError(f"hosts is {short_repr(hosts)}; it must be a mapping of host name to settings")
    inventory = {}
    for name, values in hosts.items():
        if values is None:
            values = {}
        if not isinstance(values, Mapping):
            raise ConfigError(f"hosts.{name} is {short_repr(values)}; it must be a mapping of settings")
        inventory[str(name)] = host_entry(str(name), values)
    return inventory


def read_ssh_options(config_values: Mapping[str, Any]) -> SshOptions:
    """The ``ssh:`` settings of the configuration file, checked."""
    values = config_values.get("ssh") or {}
    if not isinstance(values, Mapping):
        raise ConfigError(f"ssh is {short_repr(values)}; it must be a mapping of settings")
    known = {"control_persist": (0, 86400), "connect_timeout": (1, 600), "parallel": (1, 256)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"ssh: unknown field {unknown[0]!r} (fields: {', '.join(known)})")
    checked = {key: _integer("ssh", key, value, *known[key]) for key, value in values.items()}
    return SshOptions(**checked)
