"""How the example server joins the trace of the sparkrun operation that launched it.

sparkrun gives every process it starts ``TRACEPARENT`` (and maybe ``TRACESTATE``), the W3C context of
the span that started it. When an OTLP endpoint is configured through the standard ``OTEL_*`` variables,
each request the server answers becomes one SERVER span under that span, exported by the OpenTelemetry
SDK. The SDK is imported only then: without an endpoint nothing is imported and nothing changes, and on
a host whose ``python3`` has no SDK the server says once why it exports nothing and serves as usual.

Everything at module level is standard library, like the rest of the server.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_SERVICE_NAME",
    "FLUSH_SECONDS",
    "RequestRecord",
    "TraceParent",
    "Tracing",
    "parse_traceparent",
    "start_tracing",
]

DEFAULT_SERVICE_NAME = "example-openai-server"

# version-traceid-parentid-flags, lowercase hex; a future version may append "-" and more fields.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_TRACEPARENT_MAX_LENGTH = 512  # the OpenTelemetry propagator ignores longer values
_TRUE = {"true", "1", "yes", "on"}  # what sparkrun itself accepts for OTEL_SDK_DISABLED
_PROTOCOLS = ("http/protobuf", "grpc")
_NOT_EXPORTED = "traces: not exported:"
# The final export may wait this long; `sparkrun stop` sends SIGKILL 5 s after SIGTERM by default, and an
# unreachable endpoint would otherwise hold the exit for the exporter's whole retry budget (about 10 s).
FLUSH_SECONDS = 3.0


@dataclass(frozen=True)
class TraceParent:
    """A ``traceparent`` value that follows the W3C rules, kept as given so the propagator reads the same."""

    value: str
    trace_id: str
    parent_id: str
    flags: str

    @property
    def sampled(self) -> bool:
        """The caller's sampling decision; the SDK's default sampler follows it."""
        return int(self.flags, 16) & 1 == 1


def parse_traceparent(value: str | None) -> TraceParent | None:
    """The W3C trace context in ``value``, or None when it is missing or malformed (never raises).

    Version ``00`` has exactly four fields; a higher version may carry more after the flags, and ``ff``
    is never valid. The trace id and the parent id must not be all zeros. Hex digits are lowercase.
    What this accepts, the OpenTelemetry propagator accepts too, so the log line and the spans agree.
    """
    if not value or len(value) > _TRACEPARENT_MAX_LENGTH:
        return None
    value = value.strip(" \t")
    match = _TRACEPARENT.fullmatch(value)
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest is not None):
        return None
    if trace_id == "0" * 32 or parent_id == "0" * 16:
        return None
    return TraceParent(value, trace_id, parent_id, flags)


@dataclass
class RequestRecord:
    """What the handler learns while answering one request; the span is written from it when the request ends."""

    method: str
    path: str
    route: str | None = None  # the path, when it is one the server routes
    status: int | None = None
    error: str | None = None  # the message of an error response
    model: str | None = None
    usage: Mapping[str, int] | None = None


class Tracing:
    """Request spans for one server process; without an exporter ``request`` does nothing and imports nothing."""

    def __init__(self, notices: list[str], provider: Any = None, parent: Any = None) -> None:
        #: Lines for the server to print on stderr at startup; this module never prints.
        self.notices = notices
        self._provider = provider
        self._parent = parent  # an OpenTelemetry Context holding TRACEPARENT's span, or None
        self._tracer: Any = None
        if provider is not None:
            from opentelemetry.trace import SpanKind, Status, StatusCode

            self._tracer = provider.get_tracer(__name__)
            self._server_kind, self._status, self._codes = SpanKind.SERVER, Status, StatusCode

    @property
    def enabled(self) -> bool:
        """Whether request spans are exported."""
        return self._tracer is not None

    @contextmanager
    def request(self, record: RequestRecord) -> Iterator[None]:
        """Span the body of the ``with`` as one request; its attributes are read from ``record`` at the end."""
        if self._tracer is None:
            yield
            return
        span = self._tracer.start_span(
            record.method,
            context=self._parent,
            kind=self._server_kind,
            attributes={"http.request.method": record.method, "url.path": record.path},
        )
        failure: BaseException | None = None
        try:
            yield
        except BaseException as exc:
            failure = exc
            raise
        finally:
            _finish(span, record, failure, self._status, self._codes)

    def shutdown(self, timeout: float = FLUSH_SECONDS) -> None:
        """Export what is still queued and stop the exporter, waiting at most ``timeout`` seconds.

        Call once, when the server stops. Spans not delivered by then are lost: the exporter's threads are
        daemons and do not hold the process.
        """
        provider, self._provider, self._tracer = self._provider, None, None
        if provider is not None:
            flush = threading.Thread(target=provider.shutdown, name="trace-flush", daemon=True)
            flush.start()
            flush.join(timeout)


def _finish(span: Any, record: RequestRecord, failure: BaseException | None, status_type: Any, codes: Any) -> None:
    if record.route is not None:
        span.update_name(f"{record.method} {record.route}")
        span.set_attribute("http.route", record.route)
    if record.status is not None:
        span.set_attribute("http.response.status_code", record.status)
    if record.model is not None:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.request.model", record.model)
        span.set_attribute("gen_ai.response.model", record.model)
    if record.usage is not None:
        span.set_attribute("gen_ai.usage.input_tokens", record.usage["prompt_tokens"])
        span.set_attribute("gen_ai.usage.output_tokens", record.usage["completion_tokens"])
    if failure is not None:
        span.record_exception(failure)
        span.set_attribute("error.type", type(failure).__qualname__)
        span.set_status(status_type(codes.ERROR, f"{type(failure).__name__}: {failure}"))
    elif record.status is not None and record.status >= 400:
        span.set_attribute("error.type", str(record.status))
        span.set_status(status_type(codes.ERROR, record.error or f"HTTP {record.status}"))
    span.end()


def start_tracing() -> Tracing:
    """Read ``TRACEPARENT``, ``TRACESTATE`` and the ``OTEL_*`` variables of this process; never raises.

    The SDK is imported only when a traces endpoint is configured and export is not switched off; its
    exporter then reads the remaining ``OTEL_EXPORTER_OTLP_*`` settings (headers, timeout, ...) itself.
    """
    environ = os.environ
    notices: list[str] = []
    raw_parent = environ.get("TRACEPARENT")
    parent = parse_traceparent(raw_parent)
    if parent is not None:
        notices.append(f"trace parent: {parent.value}")
    elif raw_parent and raw_parent.strip():
        notices.append(f"trace parent: ignored, TRACEPARENT is not a W3C traceparent: {raw_parent[:100]!r}")

    setting = _export_setting(environ)
    if setting is None:
        return Tracing(notices)
    if setting.startswith(_NOT_EXPORTED):
        return Tracing([*notices, setting])
    protocol = setting
    try:
        provider = _provider(protocol, environ)
        context = _parent_context(parent, environ.get("TRACESTATE"))
    except ImportError as exc:
        reason = f"the OpenTelemetry SDK is not importable by {sys.executable} ({exc})"
        return Tracing([*notices, f"{_NOT_EXPORTED} {reason}; serving without tracing"])
    except Exception as exc:  # A bad OTEL_* value must never stop the server.
        return Tracing([*notices, f"{_NOT_EXPORTED} cannot set up the OTLP exporter: {exc}"])
    notices.append(f"traces: exporting request spans to {_shown_endpoint(protocol, environ)} over {protocol}")
    return Tracing(notices, provider, context)


def _export_setting(environ: Mapping[str, str]) -> str | None:
    """The OTLP protocol to export with, a ``traces: not exported: ...`` notice, or None (silently off)."""
    if not _endpoint(environ):
        return None
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return None
    exporters = [name.strip() for name in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if name.strip()]
    if "none" in exporters:
        return None
    if exporters and "otlp" not in exporters:
        return f"{_NOT_EXPORTED} OTEL_TRACES_EXPORTER is {','.join(exporters)!r}; this server exports only otlp"
    variable = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
    if not environ.get(variable, "").strip():
        variable = "OTEL_EXPORTER_OTLP_PROTOCOL"
    protocol = environ.get(variable, "").strip() or "http/protobuf"
    if protocol not in _PROTOCOLS:
        return f"{_NOT_EXPORTED} {variable} is {protocol!r}; expected one of {', '.join(_PROTOCOLS)}"
    return protocol


def _endpoint(environ: Mapping[str, str]) -> str:
    traces = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    return traces or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()


def _shown_endpoint(protocol: str, environ: Mapping[str, str]) -> str:
    """Where spans go, as the exporter resolves it, without any credentials or query in the URL."""
    url = _endpoint(environ)
    if protocol == "http/protobuf" and not environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip():
        url = url.rstrip("/") + "/v1/traces"
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}" if parts.scheme else url


def _provider(protocol: str, environ: Mapping[str, str]) -> Any:
    """A TracerProvider exporting in batches over ``protocol``; raises ImportError without the SDK."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, as the SDK reads them
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": DEFAULT_SERVICE_NAME}))
    exporter = OTLPSpanExporter()  # the endpoint, headers, timeout, ... from the OTEL_EXPORTER_OTLP_* variables
    # OTEL_TRACES_SAMPLER is read too; the default sampler follows the parent's flag. No atexit hook: the
    # server shuts the provider down itself, within FLUSH_SECONDS, and an unbounded second try must not follow.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _parent_context(parent: TraceParent | None, tracestate: str | None) -> Any:
    """The OpenTelemetry Context that makes TRACEPARENT's span the parent, or None for root spans."""
    if parent is None:
        return None
    from opentelemetry.context import Context
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {"traceparent": parent.value}
    if tracestate and tracestate.strip():
        carrier["tracestate"] = tracestate
    return TraceContextTextMapPropagator().extract(carrier, context=Context())
