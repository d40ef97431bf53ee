"""How many files and bytes each layer of an image holds: the relay's extraction figures.

Reading a layer means decompressing all of it, so it is done here, on the
sending side, once per layer ever (a layer is content-addressed, its figures
never change: they are cached by digest under the state directory), and in
the background while the blobs travel, rather than again on every host.
"""

from __future__ import annotations

import json
import os
import tarfile
from collections.abc import Iterable
from pathlib import Path

from sparkrun.plugins.oci_relay.layout import Descriptor, blob_path

__all__ = ["layer_figures"]

_CACHE_LIMIT = 10_000


def _count(path: Path) -> list[int] | None:
    files = size = 0
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if member.isfile():
                    files += 1
                    size += member.size
    except (tarfile.TarError, OSError, EOFError):
        return None  # not a tar archive sparkrun can read (say, zstd): a cache error on the hosts
    return [files, size]


def layer_figures(layout: Path, layers: Iterable[Descriptor], cache_path: Path) -> dict[str, list[int] | None]:
    """``{digest: [files, bytes]}`` of every layer, ``None`` for one that cannot be read."""
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
        cache = cache if isinstance(cache, dict) else {}
    except (OSError, ValueError):
        cache = {}
    figures, fresh = {}, False
    for layer in layers:
        if layer.digest not in cache:
            cache[layer.digest] = _count(blob_path(layout, layer.digest))
            fresh = True
        figures[layer.digest] = cache[layer.digest]
    if fresh and len(cache) <= _CACHE_LIMIT:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        temporary = cache_path.with_suffix(".tmp")
        temporary.write_text(json.dumps(cache), encoding="utf-8")
        os.replace(temporary, cache_path)
    return figures
