"""The image relay as a distribution provider: an image copy request in, one outcome per host out.

The source is an OCI image layout on this machine (``oci:PATH[:TAG]``).
Every target host gets its own activity (source ``oci-relay``) with the
receiver's stages, and all hosts are served at once (see
:mod:`sparkrun.core.blob_relay`).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sparkrun.core.blob_relay import Blob, relay_to_hosts
from sparkrun.core.distribution import DistributionRequest, DistributionResult, ImageCopyRequest
from sparkrun.core.executors import is_local_host
from sparkrun.plugins.oci_relay.figures import layer_figures
from sparkrun.plugins.oci_relay.layout import Image, LayoutError, blob_path, parse_reference, read_image

__all__ = ["RECEIVER_MODULES", "SOURCE", "OciRelay"]

SOURCE = "oci-relay"
RECEIVER_MODULES = ("sparkrun.plugins.oci_relay.layout", "sparkrun.plugins.oci_relay.receiver")


class _ImageReceiver:
    store = "images"
    extensions: tuple[str, ...] = RECEIVER_MODULES
    reuse_metric = "reused_layers"

    def __init__(self, image: Image, tag: str, figures: Future[dict[str, list[int] | None]]) -> None:
        self.image, self.tag, self.figures = image, tag, figures

    def import_request(self, reused: set[str]) -> dict[str, Any]:
        return {
            "action": "image.import",
            "tag": self.tag,
            "manifest": self.image.manifest.to_json(),
            "layers": [layer.to_json() for layer in self.image.layers],
            "reused": sorted(reused),
            "figures": self.figures.result(),
        }

    def present(self, imported: Mapping[str, Any]) -> list[str]:
        return [f"image {self.tag}@{self.image.manifest.digest} in {imported['store']} ({imported['engine']})"]


class OciRelay:
    """Copies images stored as OCI image layouts; the first provider for ``oci:`` sources."""

    name = SOURCE

    def accepts(self, request: DistributionRequest) -> bool:
        return isinstance(request, ImageCopyRequest) and request.source.startswith("oci:")

    def distribute(self, request: DistributionRequest) -> DistributionResult:
        if not isinstance(request, ImageCopyRequest):
            raise ValueError(f"the image relay copies images, not {request.kind} requests")
        if not is_local_host(request.source_host):
            raise ValueError(
                f"source_host is {request.source_host!r}; the image relay reads images on this machine only"
            )
        try:
            path, tag = parse_reference(request.source)
            layout = Path(path).expanduser()
            image = read_image(layout, tag, request.platform)
        except LayoutError as error:
            raise ValueError(f"image {request.source}: {error}") from None
        target_tag = tag or image.manifest.digest.split(":", 1)[1][:12]
        blobs = [Blob(blob.digest, blob.size, blob_path(layout, blob.digest)) for blob in image.blobs]
        with ThreadPoolExecutor(max_workers=1) as pool:  # counted while the blobs travel
            figures = pool.submit(layer_figures, layout, image.layers, request.state_dir / "oci-layer-figures.json")
            return relay_to_hosts(request, SOURCE, "image", blobs, _ImageReceiver(image, target_tag, figures))
