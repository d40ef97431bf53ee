"""Tracer and meter providers built from the standard ``OTEL_*`` environment.

With an OTLP endpoint configured (``OTEL_EXPORTER_OTLP_ENDPOINT`` or a
per-signal variant) spans and metrics are exported over OTLP, using
``OTEL_EXPORTER_OTLP_PROTOCOL`` (``http/protobuf`` by default, or ``grpc``);
the exporters read headers, timeouts and certificates from the environment
themselves. Without one, spans go to the local trace store under the state
directory. ``OTEL_SDK_DISABLED=true`` yields no-op providers. A bad value
never fails the caller: :mod:`otel.environment` warns once, naming the
variable, and the telemetry it configures is off.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel.environment import PROTOCOLS, check_environment
from otel.ids import OperationIdGenerator
from otel.local_store import DEFAULT_MAX_TRACES, LocalSpanExporter, TraceStore
from sparkrun.config import env_flag, otlp_endpoint

if TYPE_CHECKING:
    from opentelemetry.sdk.metrics.export import MetricReader

__all__ = ["DEFAULT_SHUTDOWN_TIMEOUT", "DeliveryWatch", "Telemetry", "configure"]

_log = logging.getLogger(__name__)
DEFAULT_SHUTDOWN_TIMEOUT = 2.0


class DeliveryWatch(SpanExporter):
    """Wraps a span exporter to count the batches it failed to deliver (the SDK only logs them)."""

    def __init__(self, exporter: SpanExporter) -> None:
        self.exporter = exporter
        self.failed = 0
        self.exported = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self.exporter.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        self.exported += 1
        if result is not SpanExportResult.SUCCESS:
            self.failed += 1
        return result

    def shutdown(self) -> None:
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return bool(self.exporter.force_flush(timeout_millis))


@dataclass
class Telemetry:
    """The providers :func:`configure` built, and how to stop them in bounded time."""

    tracer_provider: Any
    meter_provider: Any
    destination: str
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT
    watch: DeliveryWatch | None = None
    #: The span event limit of ``tracer_provider`` (None for a no-op provider), for the instrumentor.
    event_limit: int | None = None
    #: Why the last :meth:`shutdown` could not deliver everything, in a few words; None if it did.
    problem: str | None = field(default=None, init=False)
    _done: bool = field(default=False, repr=False)

    def shutdown(self, timeout: float | None = None) -> bool:
        """Flush and stop both providers, waiting at most ``timeout`` seconds.

        Returns ``False`` if spans were not delivered: the exporters did not
        finish in time (for example, an unreachable collector) or an export
        failed; :attr:`problem` says which. The process can exit regardless,
        since the export threads are daemons and no exit hook waits on them.
        """
        if self._done:
            return self.problem is None
        self._done = True
        limit = self.shutdown_timeout if timeout is None else timeout

        def stop() -> None:
            for provider in (self.tracer_provider, self.meter_provider):
                try:
                    provider.shutdown()
                except Exception:
                    _log.debug("telemetry provider shutdown failed", exc_info=True)

        worker = threading.Thread(target=stop, name="sparkrun-otel-shutdown", daemon=True)
        worker.start()
        worker.join(limit)
        if worker.is_alive():
            self.problem = f"not delivered within {limit:g} s"
        elif self.watch is not None and self.watch.failed:
            self.problem = f"{self.watch.failed} of {self.watch.exported} exports failed"
        return self.problem is None


def _resource(env: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource

    from sparkrun import __version__

    detected = OTELResourceDetector().detect()  # OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME
    defaults = {"service.version": __version__}
    if "service.name" not in detected.attributes:
        defaults["service.name"] = "sparkrun"
    return Resource.create(defaults).merge(detected)


def _span_exporter(endpoint: str | None, protocol: str, explicit: bool, store: TraceStore) -> SpanExporter:
    if endpoint is None:
        return LocalSpanExporter(store)
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter

        return GrpcSpanExporter(endpoint=endpoint) if explicit else GrpcSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if not explicit:
        return OTLPSpanExporter()
    base = endpoint.rstrip("/")
    return OTLPSpanExporter(endpoint=base if base.endswith("/v1/traces") else f"{base}/v1/traces")


def _metric_readers(env: Mapping[str, str], protocol: str | None) -> list[MetricReader]:
    if otlp_endpoint(env, "METRICS") is None or protocol is None:
        return []
    from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader

    exporter: MetricExporter
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter

        exporter = GrpcMetricExporter()
    else:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        exporter = OTLPMetricExporter()
    return [PeriodicExportingMetricReader(exporter)]


def configure(
    *,
    state_dir: Path | str | None = None,
    set_global: bool = True,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    max_traces: int = DEFAULT_MAX_TRACES,
    endpoint: str | None = None,
    protocol: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Telemetry:
    """Build providers from the environment and (by default) make them global.

    ``endpoint`` and ``protocol`` override the environment's trace endpoint
    (an OTLP/HTTP base URL gets ``/v1/traces`` appended). The OTLP exporters
    read headers and timeouts from the process environment themselves, so
    ``environ`` only steers the choices made here.
    """
    env = os.environ if environ is None else environ
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"protocol is {protocol!r}; expected one of {', '.join(PROTOCOLS)}")
    if env_flag(env.get("OTEL_SDK_DISABLED"), default=False):
        return Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider(), "disabled", shutdown_timeout)
    check = check_environment(env)
    for problem in check.problems:
        _log.warning("telemetry: %s", problem)
    if check.traces_off and (check.metrics_off or otlp_endpoint(env, "METRICS") is None):
        return Telemetry(trace.NoOpTracerProvider(), metrics.NoOpMeterProvider(), "off", shutdown_timeout)

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from sparkrun.config import default_state_dir

    resource = _resource(env)
    watch, event_limit = None, None
    if check.traces_off:
        tracer_provider: Any = trace.NoOpTracerProvider()
        destination = "off"
    else:
        store = TraceStore.in_state_dir(
            state_dir if state_dir is not None else default_state_dir(), max_traces=max_traces
        )
        explicit = endpoint is not None
        endpoint = endpoint or otlp_endpoint(env, "TRACES")
        protocol = protocol or check.protocols.get("TRACES", "http/protobuf")
        limits = SpanLimits()  # from the environment, checked above; the mapper must know its event limit
        event_limit = limits.max_events
        tracer_provider = TracerProvider(
            resource=resource, shutdown_on_exit=False, span_limits=limits, id_generator=OperationIdGenerator()
        )
        watch = DeliveryWatch(_span_exporter(endpoint, protocol, explicit, store))
        tracer_provider.add_span_processor(BatchSpanProcessor(watch))
        destination = f"otlp {protocol} {endpoint}" if endpoint else f"local store {store.directory}"
    readers = [] if check.metrics_off else _metric_readers(env, check.protocols.get("METRICS"))
    meter_provider = MeterProvider(resource=resource, metric_readers=readers, shutdown_on_exit=False)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider, destination, shutdown_timeout, watch, event_limit)
