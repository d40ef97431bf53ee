"""The one rule for names that become file names (recipes, deployments).

A name is 1 to 63 characters of lowercase letters, digits, ``.``, ``_`` and
``-``, starting with a letter or a digit. It can hold no path separator and
cannot be ``.`` or ``..``, so a name never leaves the folder it is stored in;
:func:`path_in` checks that again on the resolved path, in case the folder
holds a symbolic link.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeGuard

from sparkrun.core.short_repr import short_repr

__all__ = ["NAME_RULE", "check_name", "is_name", "path_in"]

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
NAME_RULE = "1 to 63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit"


def is_name(value: object) -> TypeGuard[str]:
    return type(value) is str and _NAME.fullmatch(value) is not None


def check_name(field: str, value: Any) -> str:
    """Return ``value`` if it follows the name rule, else raise ``ValueError`` naming ``field`` and the rule."""
    if not is_name(value):
        raise ValueError(f"{field} is {short_repr(value)}; a name is {NAME_RULE}")
    return value


def path_in(directory: Path, name: str, suffix: str, *, field: str = "name") -> Path:
    """``directory/<name><suffix>``, refused unless the name is valid and the resolved path stays in ``directory``."""
    check_name(field, name)
    path = directory / f"{name}{suffix}"
    if path.resolve().parent != directory.resolve():
        raise ValueError(f"{field} {name!r} resolves outside its folder (path={path}); remove the link at that path")
    return path
