"""The distribution hook: plugins that copy or pull images and models to hosts.

The distribute phase turns a recipe's ``image`` and ``model`` into requests
and hands each to the first registered provider that accepts it. Every
request carries a bound ``feedback`` reporter, so a provider reports its
transfer as an activity of the launch operation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from sparkrun.core.registry import Registry

if TYPE_CHECKING:
    from sparkrun.feedback import FeedbackReporter

__all__ = [
    "DistributionProvider",
    "DistributionRequest",
    "provider_for",
    "register_provider",
    "unregister_provider",
]

ENTRY_POINT_GROUP = "sparkrun.distribution"


@dataclass(frozen=True)
class DistributionRequest:
    """One image or model that must be present on ``hosts`` before launch."""

    kind: Literal["image", "model"]
    reference: str
    hosts: tuple[str, ...]
    state_dir: Path
    feedback: FeedbackReporter


class DistributionProvider(Protocol):
    """Copies or pulls what a request names; raises to fail the launch."""

    name: str

    def accepts(self, request: DistributionRequest) -> bool: ...

    def distribute(self, request: DistributionRequest) -> None: ...


_providers: Registry[DistributionProvider] = Registry(entry_points=ENTRY_POINT_GROUP)


def register_provider(provider: DistributionProvider) -> None:
    """Make ``provider`` available to every later launch."""
    _providers.add(provider)


def unregister_provider(provider: DistributionProvider) -> None:
    _providers.remove(provider)


def provider_for(request: DistributionRequest) -> DistributionProvider | None:
    """The first registered provider that accepts ``request``."""
    return next((provider for provider in _providers.items() if provider.accepts(request)), None)
