"""The example's snapshot artifact: a directory with a manifest, "weights" and one capsule per unit.

Layout under ``output.uri`` / ``artifact.uri``::

    manifest.json          model, engine, driver, units (command, host, port, capsule digest), warm-up digest
    weights.bin            4 MiB derived from the model id (SHAKE-256), so it is reproducible
    capsules/<unit>.json   what it takes to bring that unit back: its command and where it listens

Nothing here is a real process image; the capsule's command is what "restoring" runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from request import Request
from wire import rfc3339_ns

__all__ = [
    "WARMUP_PROMPT",
    "Artifact",
    "ArtifactError",
    "Capsule",
    "check_output_free",
    "file_sha256",
    "load_manifest",
    "new_output_dir",
    "publish_output",
    "read_capsule",
    "stage_capsule",
    "text_sha256",
    "verify_weights",
    "write_capsule",
    "write_manifest",
    "write_weights",
]

MANIFEST = "manifest.json"
WEIGHTS = "weights.bin"
WEIGHTS_BYTES = 4 << 20
MANIFEST_KIND = "coldsnap-example-artifact"
CAPSULE_KIND = "coldsnap-example-capsule"
#: What capture asks every unit to warm it up, and restore asks again to time the first token.
WARMUP_PROMPT = "coldsnap example warm up question"


class ArtifactError(RuntimeError):
    """The artifact is missing, malformed, does not match the request, or the output already exists."""


@dataclass(frozen=True)
class Artifact:
    """A validated manifest and where it lives."""

    root: Path
    manifest: dict[str, Any]
    manifest_sha256: str

    def units(self) -> list[dict[str, Any]]:
        return list(self.manifest["units"])


@dataclass(frozen=True)
class Capsule:
    unit: str
    command: list[str]
    warmup_answer_sha256: str


def file_sha256(path: Path) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            hasher.update(chunk)
    return "sha256:" + hasher.hexdigest()


def text_sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def check_output_free(path: Path) -> None:
    """Capture never overwrites: its replay semantics are conflict-on-existing-output."""
    if path.exists() or path.is_symlink():
        raise ArtifactError(f"the output {path} already exists; capture never replaces an artifact")


def new_output_dir(path: Path) -> Path:
    """A private scratch directory next to the output, renamed into place once complete."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    scratch = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.partial-"))
    (scratch / "capsules").mkdir()
    return scratch


def publish_output(scratch: Path, path: Path) -> None:
    check_output_free(path)
    os.rename(scratch, path)


def write_weights(scratch: Path, model_id: str) -> dict[str, Any]:
    seed = f"coldsnap-example weights\0{model_id}".encode()
    (scratch / WEIGHTS).write_bytes(hashlib.shake_256(seed).digest(WEIGHTS_BYTES))
    return {"path": WEIGHTS, "bytes": WEIGHTS_BYTES, "sha256": file_sha256(scratch / WEIGHTS)}


def write_capsule(scratch: Path, unit: dict[str, Any], model_id: str, warmup_answer_sha256: str) -> dict[str, Any]:
    """``unit`` holds id, index, host, port, worker, command and the pid it was captured from."""
    capsule = {"format": 1, "kind": CAPSULE_KIND, "model": model_id, "captured_at": rfc3339_ns(), **unit}
    capsule["warmup_answer_sha256"] = warmup_answer_sha256
    relative = f"capsules/{unit['id']}.json"
    (scratch / relative).write_text(json.dumps(capsule, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return {"path": relative, "bytes": (scratch / relative).stat().st_size, "sha256": file_sha256(scratch / relative)}


def write_manifest(scratch: Path, request: Request, weights: dict[str, Any], units: list[dict[str, Any]]) -> str:
    """``units`` are manifest entries (id, index, host, port, worker, command, capsule, warmup_answer_sha256)."""
    manifest = {
        "format": 1,
        "kind": MANIFEST_KIND,
        "created_at": rfc3339_ns(),
        "operation_id": request.id,
        "engine": request.identity.engine,
        "snapshot_driver": request.identity.snapshot_driver,
        "model": {"id": request.model_id, "revision": request.model_revision, "source": request.model_source},
        "workload": request.workload,
        "warmup": {"prompt": WARMUP_PROMPT, "answer_sha256": units[0]["warmup_answer_sha256"]},
        "weights": weights,
        "units": units,
    }
    (scratch / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return file_sha256(scratch / MANIFEST)


def _inside(root: Path, relative: Any, what: str) -> Path:
    if not isinstance(relative, str) or not relative or relative.startswith("/") or ".." in Path(relative).parts:
        raise ArtifactError(f"the manifest's {what} path {relative!r:.80} must be relative and inside the artifact")
    return root / relative


def load_manifest(root: Path, request: Request) -> Artifact:
    """Read and check the manifest against the request: same model, engine, driver and unit layout."""
    path = root / MANIFEST
    try:
        data = path.read_bytes()
        manifest = json.loads(data)
    except FileNotFoundError:
        raise ArtifactError(f"no artifact at {root} (missing {MANIFEST})") from None
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"the manifest {path} cannot be read: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("kind") != MANIFEST_KIND or manifest.get("format") != 1:
        raise ArtifactError(f"{path} is not a {MANIFEST_KIND} manifest of format 1")
    expected = {
        "model id": (manifest.get("model") or {}).get("id"),
        "engine": manifest.get("engine"),
        "snapshot driver": manifest.get("snapshot_driver"),
    }
    requested = {
        "model id": request.model_id,
        "engine": request.identity.engine,
        "snapshot driver": request.identity.snapshot_driver,
    }
    for what, value in expected.items():
        if value != requested[what]:
            raise ArtifactError(
                f"the artifact was captured with {what} {value!r:.80}, the request has {requested[what]!r}"
            )
    units = manifest.get("units")
    if not isinstance(units, list) or not all(isinstance(unit, dict) for unit in units):
        raise ArtifactError(f"{path} has no list of units")
    captured = [(unit.get("id"), unit.get("host"), unit.get("port")) for unit in units]
    wanted = [(unit.id, unit.host, unit.port) for unit in request.units]
    if captured != wanted:
        raise ArtifactError(f"the artifact was captured for units {captured}, the request has {wanted}")
    if not isinstance(manifest.get("weights"), dict):
        raise ArtifactError(f"{path} does not describe its weights")
    _inside(root, manifest["weights"].get("path"), "weights")
    for unit in units:
        if not isinstance(unit.get("capsule"), dict):
            raise ArtifactError(f"{path} has no capsule for {unit['id']}")
        _inside(root, unit["capsule"].get("path"), f"{unit['id']} capsule")
    return Artifact(root, manifest, "sha256:" + hashlib.sha256(data).hexdigest())


def verify_weights(artifact: Artifact) -> None:
    weights = artifact.manifest["weights"]
    path = _inside(artifact.root, weights.get("path"), "weights")
    try:
        actual = file_sha256(path)
    except OSError as exc:
        raise ArtifactError(f"the weights {path} cannot be read: {exc}") from None
    if actual != weights.get("sha256"):
        raise ArtifactError(f"the weights {path} have digest {actual}, the manifest says {weights.get('sha256')}")


def stage_capsule(artifact: Artifact, unit: dict[str, Any], staged: Path) -> Path:
    """Copy one capsule into ``staged`` (idempotent: a staged copy with the right digest is kept)."""
    capsule = unit["capsule"]
    source = _inside(artifact.root, capsule.get("path"), f"{unit['id']} capsule")
    target = staged / f"{unit['id']}.json"
    if target.exists() and file_sha256(target) == capsule.get("sha256"):
        return target
    staged.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = staged / f".{target.name}.tmp"
    try:
        shutil.copyfile(source, temporary)
    except OSError as exc:
        raise ArtifactError(f"the capsule {source} cannot be copied: {exc}") from None
    if file_sha256(temporary) != capsule.get("sha256"):
        temporary.unlink()
        raise ArtifactError(f"the capsule {source} does not match its digest in the manifest")
    os.replace(temporary, target)
    return target


def read_capsule(path: Path, unit_id: str) -> Capsule:
    try:
        capsule = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ArtifactError(f"the staged capsule {path} cannot be read: {exc}") from None
    if not isinstance(capsule, dict) or capsule.get("kind") != CAPSULE_KIND:
        raise ArtifactError(f"{path} is not a {CAPSULE_KIND}")
    command = capsule.get("command")
    if not isinstance(command, list) or not command:
        raise ArtifactError(f"the capsule {path} has no command")
    if capsule.get("id") != unit_id:
        raise ArtifactError(f"{path} holds unit {capsule.get('id')!r:.40}, not {unit_id}")
    return Capsule(unit_id, [str(arg) for arg in command], str(capsule.get("warmup_answer_sha256", "")))
