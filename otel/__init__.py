"""OpenTelemetry adapter for sparkrun.

Each operation becomes a trace whose id is the operation id; each feedback
activity a span; each report a span event. Native delivery stays
authoritative: the adapter is an observer and never changes what
``sctx.events`` receives. Names are imported lazily so that importing this
package (for example through its entry point) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from otel.event_replay import replay
    from otel.ids import OperationIdGenerator
    from otel.instrumentor import SparkrunInstrumentor
    from otel.providers import Telemetry, configure

__all__ = ["OperationIdGenerator", "SparkrunInstrumentor", "Telemetry", "configure", "replay"]

_HOMES = {
    "OperationIdGenerator": "otel.ids",
    "SparkrunInstrumentor": "otel.instrumentor",
    "Telemetry": "otel.providers",
    "configure": "otel.providers",
    "replay": "otel.event_replay",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'otel' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(home), name)
