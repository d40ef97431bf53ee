"""The model copy's receiving end, run by the agent on the target host: assemble the model from the store.

The files' contents are blobs of the host's ``models`` store (sent or
already there); installing links each into ``<models>/<name>/<path>`` in a
fresh folder that replaces the old one at once, with a manifest of what it
holds. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import PurePosixPath
from typing import Any

from sparkrun.core.executors.remote_agent import AgentError, Channel, register
from sparkrun.core.executors.remote_store import blob_file, store_root

__all__: list[str] = []

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def _relative(path: Any) -> PurePosixPath:
    pure = PurePosixPath(str(path))
    if not path or pure.is_absolute() or any(part in ("", ".", "..") for part in pure.parts) or "\0" in str(path):
        raise AgentError(
            f"a model file path is {str(path)!r:.200}; it must stay inside the model folder", "bad_request"
        )
    return pure


def _install(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    root = store_root("models")
    name = request["name"]
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise AgentError(f"model name is {name!r:.200}; it must be letters, digits, '.', '_' or '-'", "bad_request")
    target = root / name
    fresh = root / f".{name}.installing-{os.getpid()}"
    shutil.rmtree(fresh, ignore_errors=True)
    files = 0
    for item in request["files"]:
        relative = _relative(item.get("path"))
        path = fresh.joinpath(*relative.parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        blob = blob_file(root, str(item["digest"]))
        try:
            os.link(blob, path)  # the store's blob itself: no second copy on disk
        except OSError:
            shutil.copyfile(blob, path)
        files += 1
    manifest = [{"path": item["path"], "digest": item["digest"], "size": item["size"]} for item in request["files"]]
    (fresh / ".sparkrun-model.json").write_text(json.dumps({"name": name, "files": manifest}))
    old = root / f".{name}.old-{os.getpid()}"
    if target.exists():
        os.replace(target, old)
    os.replace(fresh, target)
    shutil.rmtree(old, ignore_errors=True)
    return {"path": str(target), "files": files, "bytes": sum(int(item["size"]) for item in request["files"])}


def _list(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    root = store_root("models")
    models = []
    for manifest in sorted(root.glob("*/.sparkrun-model.json")):
        data = json.loads(manifest.read_text())
        size = sum(int(item["size"]) for item in data["files"])
        models.append({"name": data["name"], "path": str(manifest.parent), "files": len(data["files"]), "size": size})
    return {"store": str(root), "models": models}


register("model.install", _install)
register("model.list", _list)
