"""Real OCI image layouts, built by Debian's ``umoci`` and read back by ``skopeo``, for the relay's tests.

Each layer is a tar archive written here (files of given bytes, or of a given size of seeded pseudo-random,
incompressible bytes) and appended with ``umoci raw add-layer``, which gzips it into a blob exactly as
umoci does for any image. A derived image appends one layer to a copy of a base tag in the same layout, so it
shares the base's layer blobs, which is what a relay must notice and not send twice. ``skopeo`` and
``umoci unpack`` give the real tools' view of a layout, to check the result of a relay.

Needs ``umoci`` and ``skopeo`` on ``PATH`` (``make oci-tools``). Stdlib only, so ``benchmarks/`` can import it
with the repository root on ``sys.path``::

    build_image(layout, "base", [{"etc/hello": b"hi"}, {"opt/weights.bin": 64 << 20}])
    derive_image(layout, "base", "app", {"app/run": b"#!/bin/sh"})
    rootfs = umoci_unpack(layout, "app", tmp / "bundle")
"""

from __future__ import annotations

import io
import json
import random
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = [
    "BENCHMARK_LAYERS",
    "BENCHMARK_SIZE",
    "FileSpec",
    "build_benchmark_image",
    "build_image",
    "derive_image",
    "random_bytes",
    "skopeo_inspect",
    "tool_versions",
    "umoci_unpack",
]

#: A layer's files: path in the image -> its content, or the size of seeded random content.
FileSpec = Mapping[str, bytes | int]

#: The benchmark image: about 1 GiB in 8 layers of random (incompressible) data.
BENCHMARK_SIZE = 1 << 30
BENCHMARK_LAYERS = 8

_TIMEOUT = 600
_CHUNK = 1 << 20


def _run(argv: list[str]) -> str:
    """``argv``'s standard output; a failure raises with the tool's own message."""
    done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=_TIMEOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited with {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def tool_versions() -> dict[str, str]:
    """The first line of ``umoci --version`` and ``skopeo --version``, for reports."""
    return {tool: _run([tool, "--version"]).splitlines()[0] for tool in ("umoci", "skopeo")}


def random_bytes(size: int, seed: str) -> Iterable[bytes]:
    """``size`` pseudo-random bytes in chunks, the same for the same ``seed``; gzip cannot shrink them."""
    generator = random.Random(seed)
    remaining = size
    while remaining > 0:
        count = min(_CHUNK, remaining)
        yield generator.randbytes(count)
        remaining -= count


class _Stream:
    """A read-only file over chunks of bytes, so ``tarfile`` copies a big file without holding all of it."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._chunk = b""
        self._offset = 0

    def read(self, size: int) -> bytes:
        parts = []
        while size > 0:
            if self._offset >= len(self._chunk):
                self._chunk, self._offset = next(self._chunks, b""), 0
                if not self._chunk:
                    break
            part = self._chunk[self._offset : self._offset + size]
            self._offset += len(part)
            size -= len(part)
            parts.append(part)
        return b"".join(parts)


def _write_layer_tar(path: Path, files: FileSpec, seed: str) -> None:
    """A tar of ``files`` (with their parent directories), mtime 0, root-owned, mode 0644/0755."""
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT, copybufsize=_CHUNK) as archive:
        directories: set[PurePosixPath] = set()
        for name, content in files.items():
            member = PurePosixPath(name.lstrip("/"))
            if ".." in member.parts or not member.parts:
                raise ValueError(f"file name {name!r} must be a relative path inside the image")
            for parent in reversed(list(member.parents)[:-1]):  # "a/b/c": "a", then "a/b" (not ".")
                if parent not in directories:
                    directories.add(parent)
                    info = tarfile.TarInfo(str(parent))
                    info.type, info.mode = tarfile.DIRTYPE, 0o755
                    archive.addfile(info)
            info = tarfile.TarInfo(str(member))
            info.mode = 0o644
            if isinstance(content, int):
                info.size = content
                archive.addfile(info, _Stream(random_bytes(content, f"{seed}/{member}")))
            else:
                info.size = len(content)
                archive.addfile(info, io.BytesIO(content))


def _add_layer(layout: Path, tag: str, files: FileSpec, seed: str, new_tag: str | None = None) -> None:
    with tempfile.TemporaryDirectory(prefix="oci-layer-", dir=layout.parent) as scratch:
        archive = Path(scratch) / "layer.tar"
        _write_layer_tar(archive, files, seed)
        argv = ["umoci", "raw", "add-layer", "--image", f"{layout}:{tag}", "--no-history"]
        if new_tag is not None:
            argv += ["--tag", new_tag]
        _run([*argv, str(archive)])


def build_image(layout: Path, tag: str, layers: Sequence[FileSpec], *, seed: str = "sparkrun") -> None:
    """Tag a new image ``tag`` in ``layout`` (created with ``umoci init`` if missing), one layer per entry.

    ``seed`` makes the random contents differ between images (and match between builds of the same one).
    """
    layout = Path(layout)
    if not layout.exists():
        _run(["umoci", "init", "--layout", str(layout)])
    _run(["umoci", "new", "--image", f"{layout}:{tag}"])
    for position, files in enumerate(layers):
        _add_layer(layout, tag, files, f"{seed}/{tag}/{position}")


def derive_image(layout: Path, base_tag: str, tag: str, files: FileSpec, *, seed: str = "sparkrun") -> None:
    """Tag ``tag``: the image ``base_tag`` plus one layer of ``files``, sharing the base's blobs in ``layout``."""
    _add_layer(Path(layout), base_tag, files, f"{seed}/{tag}/derived", new_tag=tag)


def build_benchmark_image(
    layout: Path,
    tag: str = "bench",
    *,
    total_size: int = BENCHMARK_SIZE,
    layer_count: int = BENCHMARK_LAYERS,
    seed: str = "sparkrun-bench",
) -> None:
    """An image of ``total_size`` random bytes in ``layer_count`` layers (one file each), like model weights.

    It needs about ``total_size`` on disk for the blobs plus one layer's tar while it is built; refuses up front
    when the file system has less than twice that.
    """
    layout = Path(layout)
    free = shutil.disk_usage(layout.parent if not layout.exists() else layout).free
    if free < 2 * total_size + (64 << 20):
        raise RuntimeError(f"{layout}: {free} bytes free; building a {total_size}-byte image needs twice that")
    share, extra = divmod(total_size, layer_count)
    sizes = [share + (1 if position < extra else 0) for position in range(layer_count)]
    layers = [{f"weights/part-{position:02d}.bin": size} for position, size in enumerate(sizes)]
    build_image(layout, tag, layers, seed=seed)


def skopeo_inspect(layout: Path, tag: str, *, raw: bool = False) -> dict[str, Any]:
    """``skopeo inspect oci:LAYOUT:TAG`` as JSON; ``raw`` gives the manifest itself (``--raw``)."""
    argv = ["skopeo", "inspect", *(["--raw"] if raw else []), f"oci:{layout}:{tag}"]
    result: dict[str, Any] = json.loads(_run(argv))
    return result


def umoci_unpack(layout: Path, tag: str, dest: Path) -> Path:
    """Unpack image ``tag`` into the runtime bundle ``dest`` (which must not exist) and return its rootfs."""
    _run(["umoci", "unpack", "--rootless", "--image", f"{layout}:{tag}", str(dest)])
    return Path(dest) / "rootfs"
