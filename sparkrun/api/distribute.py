"""``api.distribute`` and ``api.distribution_list``: images and models to hosts, and what hosts hold.

The result (or the raised :class:`~sparkrun.errors.DistributionError`, which
carries it) is authoritative: each host's outcome is decided by
verification on that host, never by a byte count.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from sparkrun.application import initialize
from sparkrun.core.blob_relay import STORE_MODULE
from sparkrun.core.context import SparkrunContext
from sparkrun.core.distribution import (
    DistributionRequest,
    DistributionResult,
    ImageCopyRequest,
    ModelCopyRequest,
    provider_for,
)
from sparkrun.core.executors import Executors
from sparkrun.core.executors.inventory import check_host_name
from sparkrun.core.operation import operation_scope
from sparkrun.errors import DistributionError
from sparkrun.feedback import FeedbackReporter, get_feedback

__all__ = ["distribute", "distribution_list", "serve_request"]

_SOURCE = "sparkrun.distribute"
_PLATFORM = re.compile(r"[a-z0-9]{1,32}/[a-z0-9_]{1,32}(/[a-z0-9]{1,16})?")


def _hosts(hosts: Sequence[str]) -> tuple[str, ...]:
    if not hosts:
        raise ValueError("hosts is empty; name at least one target host (--host)")
    checked = tuple(check_host_name(host, field="host") for host in hosts)
    repeated = sorted({host for host in checked if checked.count(host) > 1})
    if repeated:
        raise ValueError(f"host {repeated[0]!r} is named more than once")
    return checked


def _platform(value: str) -> str:
    if _PLATFORM.fullmatch(value) is None:
        raise ValueError(f"platform is {value[:80]!r}; it must be os/architecture[/variant], such as linux/arm64")
    return value


def serve_request(request: DistributionRequest) -> DistributionResult:
    """Hand ``request`` to the first provider that accepts it; a host that failed fails the call."""
    provider = provider_for(request)
    if provider is None:
        raise DistributionError(f"no distribution provider accepts this {request.kind} (source={request.source!r})")
    try:
        result = provider.distribute(request)
    except ValueError as error:
        raise DistributionError(str(error)) from None
    if not result.ok:
        failed = "; ".join(f"{host}: {reason}" for host, reason in result.failures.items())
        raise DistributionError(
            f"{request.kind} {request.source} failed on {len(result.failures)} host(s): {failed}", result
        )
    return result


def distribute(
    kind: Literal["image", "model"],
    source: str,
    hosts: Sequence[str],
    *,
    force: bool = False,
    source_host: str = "localhost",
    platform: str | None = None,
    sctx: SparkrunContext | None = None,
) -> DistributionResult:
    """Copy an image (``oci:PATH[:TAG]``) or a model directory to every host, all at once.

    ``platform`` (``os/architecture[/variant]``) picks an image's manifest from a multi-platform index.
    """
    sctx = sctx if sctx is not None else initialize()
    with operation_scope(sctx, name="distribute"):
        feedback: FeedbackReporter = get_feedback(_SOURCE, sctx=sctx)
        if kind not in ("image", "model"):
            raise ValueError(f"kind is {kind!r}; it must be image or model")
        common = (source, _hosts(hosts), feedback, sctx.config, check_host_name(source_host), force)
        request: DistributionRequest
        if kind == "image":
            request = ImageCopyRequest(*common, platform=_platform(platform) if platform else "linux/amd64")
        elif platform:
            raise ValueError("platform applies to images only (kind=model)")
        else:
            request = ModelCopyRequest(*common)
        try:
            result = serve_request(request)
        except DistributionError as error:
            feedback.error(str(error).splitlines()[0], status="failed")
            raise
        feedback.progress(f"{kind} {source} is on {', '.join(result.hosts)}", status="succeeded")
        return result


def distribution_list(host: str, *, sctx: SparkrunContext | None = None) -> dict[str, Any]:
    """The images and models ``host`` holds in its stores."""
    from sparkrun.plugins.model_copy.provider import RECEIVER_MODULES as model_receiver
    from sparkrun.plugins.oci_relay.provider import RECEIVER_MODULES as image_receiver

    sctx = sctx if sctx is not None else initialize()
    with operation_scope(sctx, name="distribute-list"):
        transport = Executors(sctx.config).transport_for(check_host_name(host, field="host"))
        images = transport.call({"action": "image.list"}, extensions=(STORE_MODULE, *image_receiver))
        models = transport.call({"action": "model.list"}, extensions=(STORE_MODULE, *model_receiver))
        return {"host": host, "images": images["images"], "models": models["models"]}
