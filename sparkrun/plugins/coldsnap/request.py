"""The operation request sparkrun hands a ColdSnap controller (``format: 4``).

A target is a recipe or a running deployment; the request describes its
launch (one unit and one worker per recipe host), the snapshot driver, the
policy, the lifecycle state wanted and where the snapshot is read or written.
Empty fields are dropped before it is sent, so the text on the controller's
stdin is already what :func:`request_digest` hashes.
"""

from __future__ import annotations

import secrets
import shlex
import socket
from pathlib import Path
from typing import Any

from sparkrun.core.recipes import render_command
from sparkrun.core.targets import Target
from sparkrun.plugins.coldsnap.canonical import drop_empty, sha256_digest
from sparkrun.plugins.coldsnap.settings import ColdSnapSettings

__all__ = [
    "OPERATIONS",
    "REQUEST_FORMAT",
    "REQUEST_KIND",
    "artifact_path",
    "build_request",
    "request_digest",
    "request_id",
]

REQUEST_FORMAT = 4
REQUEST_KIND = "coldsnap-operation-request"
#: The operations sparkrun runs (the contract's publish operations have no command here yet).
OPERATIONS = ("capture", "restore", "sleep", "wake", "status")
#: Operations whose request id gets 12 random hex characters: each run writes something new.
_UNIQUE = ("capture", "publish", "publish-native")
_ACTIVATION = {"capture": "active", "restore": "active", "wake": "active", "sleep": "sleeping"}
_READS_ARTIFACT = ("restore", "wake", "sleep", "status")


def request_id(workload: str, operation: str) -> str:
    """``<workload>-<operation>``, plus 12 random hex characters for operations that write something new."""
    base = f"{workload}-{operation}"
    return f"{base}-{secrets.token_hex(6)}" if operation in _UNIQUE else base


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _unit(target: Target, index: int, host: str, port: int, overrides: dict[str, Any]) -> dict[str, Any]:
    recipe = target.recipe
    address = "127.0.0.1" if host == "localhost" else host
    command = render_command(recipe, {**overrides, "name": target.workload, "port": port, "host": address})
    image = recipe.image or ""
    return {
        "id": f"unit-{index}",
        "index": index,
        "host": host,
        "port": port,
        "devices": [],
        "image": image,
        "image_digest": image.split("@", 1)[1] if "@sha256:" in image else "",
        "command": shlex.split(command),
        "environment": dict(recipe.env),
        "mounts": [],
    }


def build_request(
    operation: str, target: Target, settings: ColdSnapSettings, *, overrides: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The request for ``operation`` on ``target``, empty fields dropped."""
    recipe = target.recipe
    port = target.port or _free_port()
    units = [_unit(target, index, host, port, overrides or {}) for index, host in enumerate(recipe.hosts)]
    request: dict[str, Any] = {
        "format": REQUEST_FORMAT,
        "kind": REQUEST_KIND,
        "id": request_id(target.workload, operation),
        "operation": operation,
        "snapshot_driver": {"id": settings.snapshot_driver},
        "launch": {
            "engine": settings.engine,
            "model": {"id": recipe.model, "revision": settings.model_revision, "source": settings.model_source},
            "units": units,
            "execution": {
                "workers": [{"id": f"worker-{u['index']}", "unit": u["id"], "rank": u["index"]} for u in units]
            },
        },
        "policy": dict(settings.policy),
        "lifecycle": {"activation_state": _ACTIVATION.get(operation)},
        "workload": {
            "name": target.workload,
            "readiness": {"http_path": recipe.readiness.http_path, "timeout": recipe.readiness.timeout},
        },
    }
    if operation in _READS_ARTIFACT:
        request["artifact"] = settings.artifact.to_json()
    else:
        request["output"] = settings.output.to_json()
    cleaned: dict[str, Any] = drop_empty(request)
    return cleaned


def request_digest(request: dict[str, Any]) -> str:
    """``request_sha256``: the digest of the canonical JSON of the (already cleaned) request."""
    return sha256_digest(request)


def artifact_path(settings: ColdSnapSettings, operation: str) -> Path | None:
    """The local path an operation reads or writes, for ``file`` locations (shown to the user)."""
    location = settings.artifact if operation in _READS_ARTIFACT else settings.output
    return Path(location.uri) if location.provider == "file" else None
