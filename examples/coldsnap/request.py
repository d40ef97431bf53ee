"""The ColdSnap operation request, read and checked into the few values the example controller uses.

``identity`` checks just what a receipt must echo (id, operation, engine, snapshot driver); a request
failing it gets no receipt at all. ``parse_request`` checks the rest, inside the controller's span,
so its errors end in a failed receipt that says which field is wrong.
"""

from __future__ import annotations

import ipaddress
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from wire import ID_PATTERN, RequestError

__all__ = ["OPERATIONS", "Identity", "Location", "Request", "Unit", "identity", "location", "parse_request"]

OPERATIONS = ("capture", "publish", "publish-native", "restore", "sleep", "wake", "status")
NEEDS_OUTPUT = ("capture", "publish", "publish-native")
NEEDS_ARTIFACT = ("restore",)  # wake falls back on the artifact it recorded
DEFAULT_HTTP_PATH = "/v1/models"


@dataclass(frozen=True)
class Identity:
    """What every receipt repeats from the request, plus counts for the controller span."""

    id: str
    operation: str
    snapshot_driver: str
    engine: str
    units: int
    workers: int


@dataclass(frozen=True)
class Unit:
    """One server of the workload, on one loopback host."""

    id: str
    index: int
    host: str
    port: int
    worker: str
    command: tuple[str, ...]
    environment: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Location:
    """An artifact location; the example knows the ``file`` provider only."""

    provider: str
    uri: str
    path: Path


@dataclass(frozen=True)
class Request:
    raw: dict[str, Any]
    identity: Identity
    model_id: str
    model_revision: str
    model_source: str
    units: tuple[Unit, ...]
    workload: str
    http_path: str
    readiness_timeout: float
    policy: dict[str, Any]
    artifact: Location | None
    output: Location | None
    stop_grace: float = 5.0

    @property
    def id(self) -> str:
        return self.identity.id

    @property
    def operation(self) -> str:
        return self.identity.operation

    def unit(self, unit_id: str) -> Unit | None:
        return next((unit for unit in self.units if unit.id == unit_id), None)


def _get(data: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _text(data: Any, path: str, *, where: str = "") -> str:
    value = _get(data, path)
    if not isinstance(value, str) or not value:
        raise RequestError(f"{where}{path} must be a non-empty string, not {value!r:.80}")
    return value


def identity(raw: Any, operation: str) -> Identity:
    """The request's identity; a mismatch with the invoked operation is a usage error."""
    if not isinstance(raw, dict):
        raise RequestError("the request must be a JSON object")
    if raw.get("format") != 4 or raw.get("kind") != "coldsnap-operation-request":
        raise RequestError("the request must have format 4 and kind coldsnap-operation-request")
    request_id = _text(raw, "id")
    if len(request_id) > 128 or not ID_PATTERN.fullmatch(request_id):
        raise RequestError(f"id {request_id[:80]!r} must be letters, digits, '.', '_' or '-', at most 128")
    requested = _text(raw, "operation")
    if requested != operation:
        raise RequestError(f"the request is for {requested!r:.40} but the controller was invoked for {operation!r}")
    units, workers = _get(raw, "launch.units"), _get(raw, "launch.execution.workers")
    return Identity(
        id=request_id,
        operation=operation,
        snapshot_driver=_text(raw, "snapshot_driver.id"),
        engine=_text(raw, "launch.engine"),
        units=len(units) if isinstance(units, list) else 0,
        workers=len(workers) if isinstance(workers, list) else len(units) if isinstance(units, list) else 0,
    )


def _loopback(host: str, where: str) -> str:
    address = "127.0.0.1" if host == "localhost" else host
    try:
        loopback = ipaddress.ip_address(address).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise RequestError(
            f"{where}host {host!r:.80} is not a loopback address; the example controller runs every unit on "
            "this machine, so use 127.0.0.1, 127.0.0.2, ... (or ::1)"
        )
    return address


def _workers(raw: dict[str, Any]) -> dict[str, str]:
    """Unit id -> worker id; without an execution section each unit gets ``worker-<index>``."""
    workers = _get(raw, "launch.execution.workers")
    if workers is None:
        return {}
    if not isinstance(workers, list):
        raise RequestError("launch.execution.workers must be a list")
    mapping: dict[str, str] = {}
    for index, worker in enumerate(workers):
        where = f"launch.execution.workers[{index}]."
        worker_id, unit_id = _text(worker, "id", where=where), _text(worker, "unit", where=where)
        if not ID_PATTERN.fullmatch(worker_id):
            raise RequestError(f"{where}id {worker_id[:80]!r} is not a valid id")
        mapping.setdefault(unit_id, worker_id)
    return mapping


def _unit(raw_unit: Any, index: int, workers: dict[str, str]) -> Unit:
    where = f"launch.units[{index}]."
    if not isinstance(raw_unit, dict):
        raise RequestError(f"launch.units[{index}] must be an object")
    unit_id = _text(raw_unit, "id", where=where)
    if not ID_PATTERN.fullmatch(unit_id):
        raise RequestError(f"{where}id {unit_id[:80]!r} is not a valid id")
    unit_index = raw_unit.get("index", index)
    if type(unit_index) is not int or unit_index < 0:
        raise RequestError(f"{where}index must be a non-negative integer")
    port = raw_unit.get("port")
    if type(port) is not int or not 1 <= port <= 65535:
        raise RequestError(f"{where}port is {port!r:.40}; the example controller needs each unit's port (1-65535)")
    command = raw_unit.get("command")
    if not isinstance(command, list) or not command or not all(isinstance(arg, str) for arg in command):
        raise RequestError(f"{where}command must be a non-empty list of strings (an argv)")
    environment = raw_unit.get("environment") or {}
    if not isinstance(environment, dict) or not all(isinstance(value, str) for value in environment.values()):
        raise RequestError(f"{where}environment must map names to strings")
    return Unit(
        id=unit_id,
        index=unit_index,
        host=_loopback(_text(raw_unit, "host", where=where), where),
        port=port,
        worker=workers.get(unit_id, f"worker-{unit_index}"),
        command=tuple(command),
        environment=dict(environment),
    )


def location(value: Any, key: str) -> Location | None:
    """An ``artifact`` or ``output`` object (``key`` names it in errors), checked."""
    if value is None:
        return None
    provider, uri = _text(value, "provider", where=f"{key}."), _text(value, "uri", where=f"{key}.")
    if provider != "file":
        raise RequestError(f"{key}.provider is {provider!r:.40}; the example controller knows only 'file'")
    parts = urlsplit(uri)
    if parts.scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise RequestError(f"{key}.uri {uri!r:.120} names another host")
        path_text = unquote(parts.path)
    elif parts.scheme:
        raise RequestError(f"{key}.uri {uri!r:.120} must be an absolute path or a file:// URI")
    else:
        path_text = uri
    path = Path(path_text)
    if not path.is_absolute():
        raise RequestError(f"{key}.uri {uri!r:.120} must be absolute")
    return Location(provider, uri, path)


def parse_request(raw: dict[str, Any], ident: Identity) -> Request:
    """Everything the operations read, checked; errors name the field."""
    units_raw = _get(raw, "launch.units")
    if not isinstance(units_raw, list) or not units_raw:
        raise RequestError("launch.units must be a non-empty list")
    workers = _workers(raw)
    units = tuple(_unit(raw_unit, index, workers) for index, raw_unit in enumerate(units_raw))
    if len({unit.id for unit in units}) != len(units):
        raise RequestError("launch.units repeats a unit id")
    if len({(unit.host, unit.port) for unit in units}) != len(units):
        raise RequestError("two units share a host and port")
    workload = _text(raw, "workload.name")
    if not ID_PATTERN.fullmatch(workload):
        raise RequestError(f"workload.name {workload[:80]!r} must be letters, digits, '.', '_' or '-'")
    http_path = _get(raw, "workload.readiness.http_path") or DEFAULT_HTTP_PATH
    if not isinstance(http_path, str) or not http_path.startswith("/"):
        raise RequestError("workload.readiness.http_path must start with '/'")
    timeout = _get(raw, "workload.readiness.timeout") or 60.0
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 86_400:
        raise RequestError("workload.readiness.timeout must be seconds in (0, 86400]")
    policy = raw.get("policy") or {}
    if not isinstance(policy, dict):
        raise RequestError("policy must be an object")
    request = Request(
        raw=raw,
        identity=ident,
        model_id=_text(raw, "launch.model.id"),
        model_revision=str(_get(raw, "launch.model.revision") or ""),
        model_source=str(_get(raw, "launch.model.source") or ""),
        units=tuple(sorted(units, key=lambda unit: unit.index)),
        workload=workload,
        http_path=http_path,
        readiness_timeout=float(timeout),
        policy=policy,
        artifact=location(raw.get("artifact"), "artifact"),
        output=location(raw.get("output"), "output"),
        stop_grace=_stop_grace(policy),
    )
    if ident.operation in NEEDS_OUTPUT and request.output is None:
        raise RequestError(f"a {ident.operation} request needs output.uri")
    if ident.operation in NEEDS_ARTIFACT and request.artifact is None:
        raise RequestError(f"a {ident.operation} request needs artifact.uri")
    return request


def _stop_grace(policy: dict[str, Any]) -> float:
    """Seconds between SIGTERM and SIGKILL when stopping a unit: ``policy.stop_grace_seconds`` or 5."""
    value = policy.get("stop_grace_seconds", 5.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise RequestError("policy.stop_grace_seconds must be a number of seconds >= 0")
    return float(value)
