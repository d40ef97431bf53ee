"""``SparkrunInstrumentor``: attach the span mapper the OpenTelemetry way.

Like other instrumentation libraries it is a singleton with ``instrument()``
and ``uninstrument()``, and it is advertised under the
``opentelemetry_instrumentor`` entry point, so ``opentelemetry-instrument
sparkrun ...`` enables it too. It attaches through the core's observer
protocol; sparkrun's core never imports this package.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry import metrics, trace

# opentelemetry-instrumentation's instrumentor module opts out of type checking (a file-wide
# "type: ignore"), so mypy sees neither the class nor its type: it is untyped upstream.
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]

from otel.span_mapper import SpanMapper
from sparkrun.core.operation import add_observer, remove_observer

__all__ = ["SparkrunInstrumentor"]


class SparkrunInstrumentor(BaseInstrumentor):  # type: ignore[misc]  # BaseInstrumentor is untyped upstream
    """Maps every sparkrun operation started after ``instrument()`` to a trace."""

    _mapper: SpanMapper | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        tracer_provider = kwargs.get("tracer_provider") or trace.get_tracer_provider()
        meter_provider = kwargs.get("meter_provider") or metrics.get_meter_provider()
        self._mapper = SpanMapper(tracer_provider, meter_provider, event_limit=kwargs.get("event_limit"))
        add_observer(self._mapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._mapper is not None:
            remove_observer(self._mapper)
            self._mapper = None
