"""The object a restore's prepare-only run prints: proof it prepared what was asked.

A restore runs the controller twice; the first run (``--prepare-only``)
prints one JSON object on stdout, and the old workload is evicted only if
that object is about this request: its ``kind``, ``operation_id``,
``provider`` (the request's ``artifact.provider``) and ``snapshot_driver.id``
must match. Anything else in the object is the controller's and is returned
untouched. The whole of stdout must be that one object (surrounding
whitespace aside), of at most 4 MiB.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun.errors import ColdSnapError
from sparkrun.plugins.coldsnap.canonical import strict_loads
from sparkrun.plugins.coldsnap.fields import quote, request_value

__all__ = ["MAX_PREPARATION_BYTES", "PREPARATION_KIND", "PreparationError", "check_preparation"]

PREPARATION_KIND = "coldsnap-restore-preparation"
MAX_PREPARATION_BYTES = 4 * 1024 * 1024
_WHAT = "restore preparation"


class PreparationError(ColdSnapError):
    """The prepare-only output is unusable or about another request; the old workload must stay."""


def _expect(found: dict[str, Any], field: str, expected: Any, source: str) -> None:
    value: Any = found
    for key in field.split("."):
        if type(value) is not dict or key not in value:
            raise PreparationError(f"{_WHAT} has no {field}; the request's {source} is {quote(expected)}")
        value = value[key]
    if type(value) is not type(expected) or value != expected:
        raise PreparationError(f"{_WHAT} {field} is {quote(value)}; the request's {source} is {quote(expected)}")


def check_preparation(stdout: str, *, request: Mapping[str, Any]) -> dict[str, Any]:
    """The prepare-only object in ``stdout``, if it answers ``request``; else :class:`PreparationError`."""
    limit = f"the limit is {MAX_PREPARATION_BYTES} bytes (4 MiB)"
    if len(stdout) > MAX_PREPARATION_BYTES:  # every character is at least one byte
        raise PreparationError(f"{_WHAT} output is {len(stdout)} characters long; {limit}")
    size = len(stdout.encode("utf-8", "surrogatepass"))
    if size > MAX_PREPARATION_BYTES:
        raise PreparationError(f"{_WHAT} output is {size} bytes long; {limit}")
    try:
        found = strict_loads(stdout)
    except ValueError as exc:
        raise PreparationError(f"{_WHAT} output: {exc}; expected one JSON object") from None
    if type(found) is not dict:
        raise PreparationError(f"{_WHAT} output is {quote(found)}; expected one JSON object")
    if "kind" not in found or found["kind"] != PREPARATION_KIND:
        kind = f"kind is {quote(found['kind'])}" if "kind" in found else "has no kind"
        raise PreparationError(f"{_WHAT} {kind}; expected {PREPARATION_KIND!r}")
    _expect(found, "operation_id", request_value(request, "id"), "id")
    _expect(found, "provider", request_value(request, "artifact", "provider"), "artifact.provider")
    _expect(found, "snapshot_driver.id", request_value(request, "snapshot_driver", "id"), "snapshot_driver.id")
    return found
