"""What every benchmark tool's process gets on top of sparkrun's environment.

Loopback must not go through a proxy (both tools honour ``HTTP_PROXY``), so
the workload's host joins ``NO_PROXY``. Everything else is the user's: a tool
that should stay offline is told so by the user's own ``HF_HUB_OFFLINE``.
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit

__all__ = ["loopback_environment"]


def loopback_environment(base_url: str) -> dict[str, str]:
    """``NO_PROXY``/``no_proxy`` with the workload's host, loopback and what the user had."""
    host = urlsplit(base_url).hostname or "127.0.0.1"
    existing = [part for part in (os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or "").split(",") if part]
    hosts = ",".join(dict.fromkeys([*existing, host, "127.0.0.1", "localhost"]))
    return {"NO_PROXY": hosts, "no_proxy": hosts}
