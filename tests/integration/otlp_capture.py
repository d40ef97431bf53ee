"""An OTLP/HTTP receiver on loopback that keeps every request body it is sent.

The secret-leak tests need to search *every byte* an exporter sent, which a
trace backend's query API cannot show (it returns what it parsed). This
receiver answers OTLP/HTTP exports the way a Collector does (200 with an
empty protobuf response) and keeps the raw bodies; :meth:`spans` decodes the
trace exports with the OpenTelemetry protobuf definitions, so a test can also
prove that something real arrived.
"""

from __future__ import annotations

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class OTLPCapture:
    """A running receiver; use as a context manager, export to :attr:`endpoint`."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes]] = []
        self._lock = threading.Lock()
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                with capture._lock:
                    capture.bodies.append((self.path, body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> OTLPCapture:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def raw(self) -> bytes:
        with self._lock:
            return b"".join(body for _, body in self.bodies)

    def spans(self) -> list[Any]:
        """Every span of every trace export received."""
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

        spans = []
        with self._lock:
            bodies = [body for path, body in self.bodies if path.endswith("/v1/traces")]
        for body in bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource_spans in request.resource_spans:
                for scope_spans in resource_spans.scope_spans:
                    spans.extend(scope_spans.spans)
        return spans
