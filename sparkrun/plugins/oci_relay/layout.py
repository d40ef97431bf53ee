"""OCI image layouts: finding an image's blobs, verifying them, and tagging a manifest.

An OCI image layout is a directory holding ``oci-layout`` (a version marker), ``index.json`` (the tagged
manifests) and ``blobs/sha256/<hex>`` (content-addressed files). Both ends of a relay share this module: the
sender reads the image to list its blobs, the receiver checks every blob it got against its digest and only
then tags the manifest, so a host never names an image it does not fully hold.

Standard library only, and free of syntax newer than Python 3.8 at run time (annotations are never
evaluated): the receiver runs it on a bare ``python3``. A layout may come from anywhere, so every JSON file is
read with a size limit and every field is checked before use; a :class:`LayoutError` names the file or field,
the value found and the rule it breaks.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "DOCKER_MANIFEST",
    "DOCKER_MANIFEST_LIST",
    "INDEX_TYPES",
    "MANIFEST_TYPES",
    "MAX_BLOB_SIZE",
    "MAX_JSON_SIZE",
    "OCI_INDEX",
    "OCI_MANIFEST",
    "REF_NAME",
    "Descriptor",
    "Image",
    "LayoutError",
    "blob_path",
    "hash_file",
    "init_layout",
    "parse_reference",
    "read_image",
    "tag_manifest",
    "tags",
    "verify_blob",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_MANIFEST_LIST})
#: The annotation by which ``index.json`` names a manifest (the tag).
REF_NAME = "org.opencontainers.image.ref.name"
#: The largest blob a descriptor may announce (1 TiB): bigger is a hostile or broken layout.
MAX_BLOB_SIZE = 2**40
#: The largest JSON file (``oci-layout``, ``index.json``, a manifest or index blob) read into memory.
MAX_JSON_SIZE = 4 * 2**20

_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_DIGEST_RULE = "it must be 'sha256:' and 64 lowercase hex digits"
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_TAG_RULE = "a tag is 1 to 128 characters of A-Z a-z 0-9 _ . - and does not start with . or -"
_PLATFORM = re.compile(r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?")
_LAYOUT_VERSION = "1.0.0"
# An index may name another index; real images use one level, a longer chain is refused.
_MAX_NESTING = 4
_CHUNK = 1 << 20
_LISTED = 20


class LayoutError(Exception):
    """An OCI layout, reference or blob is unusable; the message names the file or field, the value and the rule."""


class _Missing:
    def __repr__(self) -> str:
        return "missing"


_MISSING: Any = _Missing()


def _show(value: object) -> str:
    """``repr`` cut to a readable length: a hostile value must not flood the message."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _listing(names: list[str]) -> str:
    if not names:
        return "none"
    shown = ", ".join(sorted(names)[:_LISTED])
    return shown if len(names) <= _LISTED else f"{shown} and {len(names) - _LISTED} more"


def _check_digest(value: object, field: str) -> str:
    if not isinstance(value, str) or not _DIGEST.fullmatch(value):
        raise LayoutError(f"{field} is {_show(value)}; {_DIGEST_RULE}")
    return value


def _check_tag(value: object, field: str) -> str:
    if not isinstance(value, str) or not _TAG.fullmatch(value):
        raise LayoutError(f"{field} is {_show(value)}; {_TAG_RULE}")
    return value


class Descriptor(NamedTuple):
    """A blob as manifests and indexes name it: its media type, ``sha256:`` digest and size in bytes."""

    media_type: str
    digest: str
    size: int

    def to_json(self) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}

    @classmethod
    def from_json(cls, data: object, field: str) -> Descriptor:
        """The descriptor ``data`` holds, checked; ``field`` (``index.json: manifests[1]``) names it in errors."""
        if not isinstance(data, dict):
            raise LayoutError(f"{field} is {_show(data)}; it must be a JSON object")
        media_type = data.get("mediaType", _MISSING)
        if not isinstance(media_type, str) or not 0 < len(media_type) <= 255:
            raise LayoutError(f"{field}.mediaType is {_show(media_type)}; it must be a string of 1 to 255 characters")
        digest = _check_digest(data.get("digest", _MISSING), f"{field}.digest")
        size = data.get("size", _MISSING)
        if type(size) is not int or not 0 <= size <= MAX_BLOB_SIZE:
            raise LayoutError(f"{field}.size is {_show(size)}; it must be an integer from 0 to {MAX_BLOB_SIZE} (1 TiB)")
        return cls(media_type, digest, size)


class Image(NamedTuple):
    """One platform's image: the manifest and the blobs it names, which is everything a host needs to run it."""

    manifest: Descriptor
    config: Descriptor
    layers: tuple[Descriptor, ...]

    @property
    def blobs(self) -> tuple[Descriptor, ...]:
        """Manifest, config and layers in that order, each digest once: the blobs a relay must deliver."""
        seen: set[str] = set()
        unique = []
        for descriptor in (self.manifest, self.config, *self.layers):
            if descriptor.digest not in seen:
                seen.add(descriptor.digest)
                unique.append(descriptor)
        return tuple(unique)

    @property
    def total_size(self) -> int:
        return sum(descriptor.size for descriptor in self.blobs)


def parse_reference(text: str) -> tuple[str, str | None]:
    """``oci:PATH[:TAG]`` as ``(PATH, TAG or None)``, the way the recipe field ``image`` names a local layout.

    The last ``:`` starts a tag unless what follows it contains a ``/``: ``oci:/img:v1`` is ``/img`` tagged
    ``v1``, ``oci:/mnt/a:b/img`` is the untagged path ``/mnt/a:b/img``, and ``oci:/img:bad tag`` is an error
    (a ``:`` that starts a tag must be followed by a valid tag). The path is not normalized or restricted: it
    is a path on this machine, chosen by whoever wrote the recipe.
    """
    if not isinstance(text, str) or not text.startswith("oci:"):
        raise LayoutError(f"image is {_show(text)}; it must be 'oci:PATH' or 'oci:PATH:TAG' (an OCI image layout)")
    body = text[len("oci:") :]
    path, colon, tag = body.rpartition(":")
    if not colon or "/" in tag:
        path, found_tag = body, None
    elif not _TAG.fullmatch(tag):
        raise LayoutError(f"image is {_show(text)}; its tag {_show(tag)} is invalid: {_TAG_RULE}")
    else:
        found_tag = tag
    if not path:
        raise LayoutError(f"image is {_show(text)}; the layout path after 'oci:' is empty")
    if any(ord(char) < 32 or char == "\x7f" for char in path):
        raise LayoutError(f"image is {_show(text)}; the layout path must not contain control characters")
    return path, found_tag


def blob_path(layout: Path, digest: str) -> Path:
    """Where ``digest`` lives in ``layout``; the digest is checked first, so the path stays in ``blobs/sha256``."""
    _check_digest(digest, "digest")
    return Path(layout) / "blobs" / "sha256" / digest[len("sha256:") :]


def hash_file(path: Path, chunk: int = _CHUNK) -> tuple[str, int]:
    """The ``sha256:`` digest and size of the file at ``path``, read in chunks so any size fits in memory."""
    digest = hashlib.sha256()
    size = 0
    buffer = bytearray(chunk)
    view = memoryview(buffer)
    with open(path, "rb", buffering=0) as file:
        while True:
            count = file.readinto(buffer)
            if not count:
                break
            digest.update(view[:count])
            size += count
    return "sha256:" + digest.hexdigest(), size


def _size_mismatch(digest: str, found: int, expected: int) -> LayoutError:
    return LayoutError(f"blob {digest} holds {found} bytes; its descriptor says {expected}")


def _digest_mismatch(digest: str, found: str) -> LayoutError:
    return LayoutError(f"blob {digest} does not match its digest: expected {digest}, found {found}")


def verify_blob(layout: Path, descriptor: Descriptor) -> None:
    """Raise unless the blob ``descriptor`` names is present with exactly its size and digest."""
    path = blob_path(layout, descriptor.digest)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise LayoutError(f"blob {descriptor.digest} is missing ({path})") from None
    if not stat.S_ISREG(info.st_mode):
        raise LayoutError(f"blob {descriptor.digest} is not a regular file ({path})")
    if info.st_size != descriptor.size:
        raise _size_mismatch(descriptor.digest, info.st_size, descriptor.size)
    found, size = hash_file(path)
    if size != descriptor.size:  # the file changed while it was read
        raise _size_mismatch(descriptor.digest, size, descriptor.size)
    if found != descriptor.digest:
        raise _digest_mismatch(descriptor.digest, found)


def _read_limited(path: Path, name: str) -> bytes:
    """The bytes of a regular file of at most :data:`MAX_JSON_SIZE` (non-blocking open: a FIFO must not hang us)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise LayoutError(f"{name} is missing ({path})") from None
    except OSError as exc:
        raise LayoutError(f"{name} cannot be read: {exc.strerror} ({path})") from None
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LayoutError(f"{name} is not a regular file ({path})")
        data = file.read(MAX_JSON_SIZE + 1)
    if len(data) > MAX_JSON_SIZE:
        raise LayoutError(f"{name} is larger than {MAX_JSON_SIZE} bytes, the limit for a layout's JSON files")
    return data


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Two parsers that keep different copies of a duplicated key would see different images.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"the key {key!r} appears twice in one object")
        result[key] = value
    return result


def _parse_object(data: bytes, name: str) -> dict[str, Any]:
    try:
        value = json.loads(data.decode("utf-8"), parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except UnicodeDecodeError as exc:
        raise LayoutError(f"{name} is not UTF-8 text (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise LayoutError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise LayoutError(f"{name} holds {_show(value)}; it must hold a JSON object")
    return value


def _check_schema_version(doc: dict[str, Any], name: str) -> None:
    version = doc.get("schemaVersion", _MISSING)
    if type(version) is not int or version != 2:
        raise LayoutError(f"{name}: schemaVersion is {_show(version)}; it must be 2")


def _check_layout(layout: Path) -> None:
    marker = _parse_object(_read_limited(layout / "oci-layout", "oci-layout"), "oci-layout")
    version = marker.get("imageLayoutVersion", _MISSING)
    if version != _LAYOUT_VERSION:
        raise LayoutError(f"oci-layout: imageLayoutVersion is {_show(version)}; it must be {_LAYOUT_VERSION!r}")


class _Entry(NamedTuple):
    descriptor: Descriptor
    field: str
    ref_name: str | None
    platform: str | None
    raw: dict[str, Any]


def _entries(doc: dict[str, Any], name: str) -> list[_Entry]:
    """The checked ``manifests`` of an index (``index.json`` or an index blob)."""
    manifests = doc.get("manifests", _MISSING)
    if not isinstance(manifests, list):
        raise LayoutError(f"{name}: manifests is {_show(manifests)}; it must be a list")
    entries = []
    for position, raw in enumerate(manifests):
        field = f"{name}: manifests[{position}]"
        descriptor = Descriptor.from_json(raw, field)
        annotations = raw.get("annotations", {})
        if not isinstance(annotations, dict):
            raise LayoutError(f"{field}.annotations is {_show(annotations)}; it must be a JSON object")
        ref_name = annotations.get(REF_NAME)
        if ref_name is not None and not isinstance(ref_name, str):
            raise LayoutError(f"{field}.annotations[{REF_NAME!r}] is {_show(ref_name)}; it must be a string")
        entries.append(_Entry(descriptor, field, ref_name, _platform_of(raw.get("platform")), raw))
    return entries


def _platform_of(platform: object) -> str | None:
    if not isinstance(platform, dict):
        return None
    parts = [platform.get("os"), platform.get("architecture"), platform.get("variant")]
    if not isinstance(parts[0], str) or not isinstance(parts[1], str):
        return None
    return "/".join(part for part in parts if isinstance(part, str) and part)


def _read_index(layout: Path) -> tuple[dict[str, Any], list[_Entry]]:
    doc = _parse_object(_read_limited(layout / "index.json", "index.json"), "index.json")
    _check_schema_version(doc, "index.json")
    return doc, _entries(doc, "index.json")


def tags(layout: Path) -> dict[str, Descriptor]:
    """Each tag in the layout's ``index.json`` and the manifest (or index) it names."""
    layout = Path(layout)
    _check_layout(layout)
    found: dict[str, Descriptor] = {}
    for entry in _read_index(layout)[1]:
        if entry.ref_name is None:
            continue
        if entry.ref_name in found:
            raise LayoutError(f"index.json: the tag {entry.ref_name!r} names more than one manifest")
        found[entry.ref_name] = entry.descriptor
    return found


def _tagged(entries: list[_Entry], tag: str | None) -> _Entry:
    names = [entry.ref_name for entry in entries if entry.ref_name is not None]
    if tag is None:
        if len(entries) == 1:
            return entries[0]
        if not entries:
            raise LayoutError("index.json: manifests is empty; the layout holds no image")
        raise LayoutError(f"index.json lists {len(entries)} manifests; name one with a tag (tags: {_listing(names)})")
    matches = [entry for entry in entries if entry.ref_name == tag]
    if not matches:
        raise LayoutError(f"tag {tag!r} is not in index.json (tags: {_listing(names)})")
    if len(matches) > 1:
        raise LayoutError(f"index.json: the tag {tag!r} names {len(matches)} manifests; it must name one")
    return matches[0]


def _for_platform(entries: list[_Entry], name: str, platform: str) -> _Entry:
    if not entries:
        raise LayoutError(f"{name}: manifests is empty; the index names no image")
    for entry in entries:
        if entry.platform is not None and (entry.platform == platform or entry.platform.startswith(platform + "/")):
            return entry
    if len(entries) == 1:
        return entries[0]
    found = [entry.platform or "unspecified" for entry in entries]
    raise LayoutError(f"{name} has no manifest for the platform {platform} (platforms: {_listing(found)})")


def _read_manifest_blob(layout: Path, entry: _Entry) -> tuple[str, dict[str, Any]]:
    """A manifest or index blob, verified against its descriptor before it is parsed."""
    descriptor = entry.descriptor
    if descriptor.media_type in MANIFEST_TYPES:
        name = f"manifest {descriptor.digest}"
    elif descriptor.media_type in INDEX_TYPES:
        name = f"index {descriptor.digest}"
    else:
        accepted = ", ".join(sorted(MANIFEST_TYPES | INDEX_TYPES))
        raise LayoutError(f"{entry.field}.mediaType is {_show(descriptor.media_type)}; it must be one of {accepted}")
    if descriptor.size > MAX_JSON_SIZE:
        raise LayoutError(
            f"{entry.field}.size is {descriptor.size}; a manifest or index is at most {MAX_JSON_SIZE} bytes"
        )
    data = _read_limited(blob_path(layout, descriptor.digest), f"blob {descriptor.digest}")
    if len(data) != descriptor.size:
        raise _size_mismatch(descriptor.digest, len(data), descriptor.size)
    found = "sha256:" + hashlib.sha256(data).hexdigest()
    if found != descriptor.digest:
        raise _digest_mismatch(descriptor.digest, found)
    doc = _parse_object(data, name)
    _check_schema_version(doc, name)
    media_type = doc.get("mediaType", descriptor.media_type)
    if media_type != descriptor.media_type:
        raise LayoutError(
            f"{name}: mediaType is {_show(media_type)}; it must match its descriptor's {descriptor.media_type!r}"
        )
    return name, doc


def read_image(layout: Path, tag: str | None, platform: str = "linux/amd64") -> Image:
    """The image ``tag`` names in ``layout`` (or its only image), down to one platform's manifest.

    Every JSON file on the way is size-limited and checked, and the manifest blob is verified against its
    digest, so the blob list returned is the one the tag really names; config and layer blobs are not read
    (see :func:`verify_blob`). A tag naming an index resolves to its ``platform`` entry, or its only entry.
    """
    layout = Path(layout)
    if tag is not None:
        _check_tag(tag, "tag")
    if not _PLATFORM.fullmatch(platform):
        raise LayoutError(f"platform is {_show(platform)}; it must be OS/ARCHITECTURE[/VARIANT], like 'linux/amd64'")
    _check_layout(layout)
    entry = _tagged(_read_index(layout)[1], tag)
    for _ in range(_MAX_NESTING):
        name, doc = _read_manifest_blob(layout, entry)
        if entry.descriptor.media_type in MANIFEST_TYPES:
            config = Descriptor.from_json(doc.get("config", _MISSING), f"{name}: config")
            layers = doc.get("layers", _MISSING)
            if not isinstance(layers, list):
                raise LayoutError(f"{name}: layers is {_show(layers)}; it must be a list")
            found = tuple(Descriptor.from_json(layer, f"{name}: layers[{i}]") for i, layer in enumerate(layers))
            return Image(entry.descriptor, config, found)
        entry = _for_platform(_entries(doc, name), name, platform)
    raise LayoutError(f"{entry.field} is nested more than {_MAX_NESTING} indexes deep; real images use one")


@contextlib.contextmanager
def _locked(layout: Path) -> Iterator[None]:
    """Holds an exclusive lock on the layout directory: concurrent relays to one host must not lose a tag."""
    fd = os.open(layout, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Readers see the old file or the new one, never a partial write."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(json.dumps(doc, separators=(",", ":")).encode("utf-8"))
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def init_layout(layout: Path) -> None:
    """Create an empty layout at ``layout``, or complete a partly created one; a valid layout is left alone.

    Existing files are never rewritten: an ``oci-layout`` of another version or an unreadable ``index.json``
    raise :class:`LayoutError` instead.
    """
    layout = Path(layout)
    try:
        (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise LayoutError(f"layout {str(layout)!r} cannot be created: {exc.strerror}") from None
    with _locked(layout):
        if not os.path.lexists(layout / "oci-layout"):
            _write_atomic(layout / "oci-layout", {"imageLayoutVersion": _LAYOUT_VERSION})
        if not os.path.lexists(layout / "index.json"):
            _write_atomic(layout / "index.json", {"schemaVersion": 2, "manifests": []})
        _check_layout(layout)
        _read_index(layout)


def tag_manifest(layout: Path, manifest: Descriptor, tag: str) -> None:
    """Name ``manifest`` ``tag`` in ``index.json``, replacing whatever held the tag before.

    The manifest blob must already be in the layout with its exact size and digest (checking the blobs it
    names is the caller's job). Other entries are kept as they were; the file is replaced atomically under a
    lock on the layout directory.
    """
    layout = Path(layout)
    _check_tag(tag, "tag")
    manifest = Descriptor.from_json(manifest.to_json(), "manifest")
    if manifest.media_type not in MANIFEST_TYPES | INDEX_TYPES:
        accepted = ", ".join(sorted(MANIFEST_TYPES | INDEX_TYPES))
        raise LayoutError(f"manifest.mediaType is {_show(manifest.media_type)}; it must be one of {accepted}")
    _check_layout(layout)
    verify_blob(layout, manifest)
    with _locked(layout):
        doc, entries = _read_index(layout)
        entry = manifest.to_json()
        entry["annotations"] = {REF_NAME: tag}
        doc["manifests"] = [existing.raw for existing in entries if existing.ref_name != tag] + [entry]
        _write_atomic(layout / "index.json", doc)
