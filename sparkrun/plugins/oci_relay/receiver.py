"""The image relay's receiving end, run by the agent on the target host: tag the image, count what it holds.

Sent after :mod:`sparkrun.core.executors.remote_store` with the layout
module. Importing tags the manifest in the host's OCI layout store (the
blobs are already there and whole), records the extraction figures the
sender counted once per layer (files and bytes; a reused layer is a cache
hit, a layer that cannot be read as a tar archive a cache error) and hands
the image to a container engine when one answers. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from sparkrun.core.executors.remote_agent import Channel, register
from sparkrun.core.executors.remote_store import store_root
from sparkrun.plugins.oci_relay.layout import Descriptor, init_layout, tag_manifest, tags

__all__: list[str] = []


def _engine(root: Path, tag: str) -> str:
    """Load the image into podman or docker when one of them answers; otherwise say why not."""
    if shutil.which("skopeo") is None:
        return "skipped: skopeo is not installed on this host"
    for engine, target in (("podman", f"containers-storage:{tag}"), ("docker", f"docker-daemon:{tag}")):
        if shutil.which(engine) is None:
            continue
        probe = subprocess.run([engine, "info"], capture_output=True, timeout=10)
        if probe.returncode != 0:
            continue
        done = subprocess.run(["skopeo", "copy", f"oci:{root}:{tag}", target], capture_output=True, timeout=600)
        if done.returncode != 0:
            reason = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[-1]
            return f"failed: {engine}: {reason}"
        return f"imported into {engine}"
    return "skipped: no container engine (podman, docker) answers on this host"


def _import(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    root = store_root("images")
    init_layout(root)
    manifest = Descriptor.from_json(request["manifest"], "manifest")
    reused = set(request.get("reused", []))
    figures = request.get("figures") or {}
    files = size = hits = errors = 0
    for item in request["layers"]:
        layer = Descriptor.from_json(item, "layers")
        counted = figures.get(layer.digest)
        if layer.digest in reused:
            hits += 1
        elif not (isinstance(counted, list) and len(counted) == 2):
            errors += 1
            continue
        if isinstance(counted, list) and len(counted) == 2:
            files, size = files + int(counted[0]), size + int(counted[1])
    tag_manifest(root, manifest, request["tag"])
    return {
        "files": files,
        "bytes": size,
        "cache_hits": hits,
        "cache_errors": errors,
        "engine": _engine(root, request["tag"]),
        "store": str(root),
    }


def _list(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    root = store_root("images")
    init_layout(root)
    return {"store": str(root), "images": [{"tag": t, **d.to_json()} for t, d in sorted(tags(root).items())]}


register("image.import", _import)
register("image.list", _list)
