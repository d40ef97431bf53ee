"""The model copy as a distribution provider: a model directory to each host's model cache.

Files are blobs named by their sha256, so only missing or changed files
move, and two models sharing a file share it on the host too. Every target
host gets its own activity (source ``model-copy``) with the receiver's
stages (see :mod:`sparkrun.core.blob_relay`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sparkrun.core.blob_relay import Blob, relay_to_hosts
from sparkrun.core.distribution import DistributionRequest, DistributionResult, ModelCopyRequest
from sparkrun.core.executors import is_local_host
from sparkrun.plugins.model_copy.files import ModelFile, check_model_name, model_files

__all__ = ["RECEIVER_MODULES", "SOURCE", "ModelCopy"]

SOURCE = "model-copy"
RECEIVER_MODULES = ("sparkrun.plugins.model_copy.receiver",)


class _ModelReceiver:
    store = "models"
    extensions: tuple[str, ...] = RECEIVER_MODULES
    reuse_metric = "reused_files"

    def __init__(self, name: str, files: list[ModelFile]) -> None:
        self.name, self.files = name, files

    def import_request(self, reused: set[str]) -> dict[str, Any]:
        files = [{"path": f.path, "digest": f.digest, "size": f.size, "mode": f.mode} for f in self.files]
        return {"action": "model.install", "name": self.name, "files": files}

    def present(self, imported: Mapping[str, Any]) -> list[str]:
        return [f"model {self.name} at {imported['path']} ({imported['files']} files)"]


class ModelCopy:
    """Copies model directories from this machine; the first provider for model copy requests."""

    name = SOURCE

    def accepts(self, request: DistributionRequest) -> bool:
        return isinstance(request, ModelCopyRequest)

    def distribute(self, request: DistributionRequest) -> DistributionResult:
        if not is_local_host(request.source_host):
            raise ValueError(
                f"source_host is {request.source_host!r}; the model copy reads models on this machine only"
            )
        directory = Path(request.source).expanduser()
        name = check_model_name(directory.resolve().name)
        files = model_files(directory, request.state_dir / "model-hashes.json")
        unique = {f.digest: Blob(f.digest, f.size, f.source) for f in files}
        return relay_to_hosts(request, SOURCE, "model", list(unique.values()), _ModelReceiver(name, files))
