"""The distribution hook: plugins that copy or pull images and models to hosts.

A request is typed (an image copy, an image pull, a model copy) and names
its source, the host the source is on, the target hosts and whether to send
everything again (``force``); it carries a bound ``feedback`` reporter, so a
provider reports its work as an activity of the caller's operation. The
provider returns one outcome per host: what happened, why it failed, and
what is now present there. Providers register directly or through the
``sparkrun.distribution`` entry point; the first that accepts a request
serves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sparkrun.core.registry import Registry

if TYPE_CHECKING:
    from sparkrun.config import Config
    from sparkrun.feedback import FeedbackReporter

__all__ = [
    "DistributionProvider",
    "DistributionRequest",
    "DistributionResult",
    "HostOutcome",
    "ImageCopyRequest",
    "ImagePullRequest",
    "ModelCopyRequest",
    "provider_for",
    "register_provider",
    "unregister_provider",
]

ENTRY_POINT_GROUP = "sparkrun.distribution"


@dataclass(frozen=True)
class _Request:
    source: str
    hosts: tuple[str, ...]
    feedback: FeedbackReporter
    config: Config
    source_host: str = "localhost"
    force: bool = False

    @property
    def state_dir(self) -> Path:
        return self.config.state_dir


@dataclass(frozen=True)
class ImageCopyRequest(_Request):
    """Copy an image stored as an OCI image layout (``oci:PATH[:TAG]``) to each host's image store.

    ``platform`` picks the manifest when the tag names a multi-platform index
    (``linux/arm64`` for a DGX Spark); a single-platform image ignores it.
    """

    kind = "image"
    platform: str = "linux/amd64"


@dataclass(frozen=True)
class ImagePullRequest(_Request):
    """Have each host pull an image from a registry (``source`` is the registry reference)."""

    kind = "image-pull"


@dataclass(frozen=True)
class ModelCopyRequest(_Request):
    """Copy a model directory (weights, config, tokenizer files) to each host's model cache."""

    kind = "model"


DistributionRequest = ImageCopyRequest | ImagePullRequest | ModelCopyRequest


@dataclass
class HostOutcome:
    """One host's end: ``succeeded``, ``failed`` or ``skipped``, why, and what it now has."""

    host: str
    outcome: str
    error: str | None = None
    present: list[str] = field(default_factory=list)
    metrics: dict[str, int | float | str] = field(default_factory=dict)


@dataclass
class DistributionResult:
    """What a provider did, per host; ``ok`` when every host succeeded."""

    provider: str
    kind: str
    source: str
    hosts: dict[str, HostOutcome]

    @property
    def ok(self) -> bool:
        return all(outcome.outcome == "succeeded" for outcome in self.hosts.values())

    @property
    def failures(self) -> dict[str, str]:
        return {host: outcome.error or outcome.outcome for host, outcome in self.hosts.items() if not self.ok_on(host)}

    def ok_on(self, host: str) -> bool:
        return self.hosts[host].outcome == "succeeded"


class DistributionProvider(Protocol):
    """Copies or pulls what a request names; reports per host and returns every host's outcome."""

    name: str

    def accepts(self, request: DistributionRequest) -> bool: ...

    def distribute(self, request: DistributionRequest) -> DistributionResult: ...


_providers: Registry[DistributionProvider] = Registry(entry_points=ENTRY_POINT_GROUP)


def register_provider(provider: DistributionProvider) -> None:
    """Make ``provider`` available to every later request."""
    _providers.add(provider)


def unregister_provider(provider: DistributionProvider) -> None:
    _providers.remove(provider)


def provider_for(request: DistributionRequest) -> DistributionProvider | None:
    """The first registered provider that accepts ``request`` (the in-tree ones are entry points too)."""
    return next((provider for provider in _providers.items() if provider.accepts(request)), None)
