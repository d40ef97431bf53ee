"""A minimal OpenAI-compatible inference server that sparkrun recipes launch as an example workload.

It stands in for a real engine (vLLM, llama.cpp, ...) in examples, integration tests and benchmark runs:
it speaks the same HTTP surface (``/health``, ``/v1/models``, ``/v1/chat/completions`` with and without
streaming), takes a while to "load" like a real model, logs one line per request and stops cleanly on
SIGTERM. Standard library only, so it runs on any host with Python.

Replies are deterministic, so tests can assert exact output (the rules live in ``example_engine/``):

- a plain message gets ``echo:`` followed by its words in reverse order (a question about the capital
  of a country it knows gets the city instead, which is what llama-benchy's coherence check asks);
- a request that offers ``tools`` gets OpenAI ``tool_calls`` chosen by keyword rules, and after the tool
  results a final answer restating them (``example_engine/tools.py``);
- tokens are whitespace-separated words; ``usage`` counts them, also at the end of a stream when
  ``stream_options.include_usage`` asks; ``max_tokens``, ``max_completion_tokens``, ``min_tokens`` and
  ``ignore_eos`` set the reply's length (``example_engine/chat.py``).

``--prompt-token-delay`` and ``--token-delay`` make "prefill" and "generation" take time, so benchmarks
measure finite token rates and a stream can be watched token by token.

With ``TRACEPARENT`` and an OTLP endpoint in its environment (``OTEL_EXPORTER_OTLP_ENDPOINT``, ...), each
request becomes a span in the trace of the sparkrun operation that launched it (``example_engine/tracing.py``).

Usage:
    python examples/workloads/openai_server.py --host 127.0.0.1 --port 8000 --model NAME [--startup-delay 5]
        [--prompt-token-delay SECONDS] [--token-delay SECONDS]
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from example_engine.chat import ClientError, assemble, completion_id, parse_chat_request, reply_deltas, usage
from example_engine.tracing import RequestRecord, Tracing, start_tracing

CREATED = 1_700_000_000  # Fixed, so identical requests give byte-identical responses.
MAX_BODY_BYTES = 16 << 20  # Far above a long-context benchmark prompt; refuse to buffer anything bigger.


class Shutdown(BaseException):
    """Raised in the main thread by the signal handler, so loading and serving unwind the same way."""


def log(line: str) -> None:
    """Write one whole line and flush, so a supervisor tailing stdout sees it at once."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def error_body(message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error envelope, which clients parse to show the message."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


class Handler(BaseHTTPRequestHandler):
    """Routes the OpenAI subset; every answer, errors included, is JSON or Server-Sent Events."""

    protocol_version = "HTTP/1.1"
    server_version = "sparkrun-example/1.0"
    # Headers and body go out as separate writes; with Nagle's algorithm the body would wait for the
    # client's delayed ACK (about 40 ms), which benchmarks would measure as network latency.
    disable_nagle_algorithm = True
    record: RequestRecord | None = None  # the request being answered, for its span

    @property
    def model(self) -> str:
        return self.server.model  # type: ignore[attr-defined]

    def _pause(self, per_token: str, tokens: int) -> None:
        """Simulated compute: ``tokens`` times the server's ``--prompt-token-delay`` or ``--token-delay``."""
        time.sleep(getattr(self.server, per_token) * tokens)

    def _dispatch(self) -> None:
        path = urlsplit(self.path).path
        self.record = RequestRecord(self.command, path)
        try:
            with self.server.tracing.request(self.record):  # type: ignore[attr-defined]
                self._route(path)
        finally:
            self.record = None

    def _route(self, path: str) -> None:
        routes = {
            "/health": {"GET": self._health},
            "/v1/models": {"GET": self._models},
            "/v1/chat/completions": {"POST": self._chat},
        }
        try:
            body = self._read_body()  # Always consumed, so a kept-alive connection stays in step.
            methods = routes.get(path)
            if methods is None:
                raise ClientError(HTTPStatus.NOT_FOUND, f"Invalid URL ({self.command} {path}).")
            if self.record is not None:
                self.record.route = path
            if self.command not in methods:
                allowed = ", ".join(methods)
                message = f"Method {self.command} is not allowed on {path}; use {allowed}."
                self._send_json(HTTPStatus.METHOD_NOT_ALLOWED, error_body(message), {"Allow": allowed})
                return
            methods[self.command](body)
        except ClientError as exc:
            self._send_json(exc.status, error_body(exc.message, exc.param, exc.code))
        except ConnectionError:
            self.close_connection = True  # The client hung up; nothing left to tell it.

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _dispatch

    def _read_body(self) -> bytes:
        header = self.headers.get("Content-Length")
        if header is None:
            return b""
        if not header.isdigit():
            self.close_connection = True
            raise ClientError(HTTPStatus.BAD_REQUEST, "Invalid Content-Length header.")
        if int(header) > MAX_BODY_BYTES:
            self.close_connection = True
            raise ClientError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "Request body is too large.")
        return self.rfile.read(int(header))

    def _health(self, _body: bytes) -> None:
        self._send_json(HTTPStatus.OK, {"status": "ok", "model": self.model})

    def _models(self, _body: bytes) -> None:
        model = {"id": self.model, "object": "model", "created": CREATED, "owned_by": "sparkrun-example"}
        self._send_json(HTTPStatus.OK, {"object": "list", "data": [model]})

    def _chat(self, body: bytes) -> None:
        request = parse_chat_request(body, self.model)
        reply_id = completion_id(request.messages)
        deltas, finish_reason = reply_deltas(request, reply_id)
        counts = usage(request, deltas)
        if self.record is not None:
            self.record.model, self.record.usage = self.model, counts
        base = {"id": reply_id, "object": "chat.completion", "created": CREATED, "model": self.model}
        self._pause("prompt_token_delay", counts["prompt_tokens"])
        if request.stream:
            self._stream(base, deltas, finish_reason, counts if request.include_usage else None)
            return
        self._pause("token_delay", len(deltas))
        choice = {"index": 0, "message": assemble(deltas), "finish_reason": finish_reason}
        self._send_json(HTTPStatus.OK, {**base, "choices": [choice], "usage": counts})

    def _stream(
        self, base: dict[str, Any], deltas: list[dict[str, Any]], finish_reason: str, counts: dict[str, int] | None
    ) -> None:
        """One SSE event per token, flushed at once, as a token-streaming engine sends them.

        The first event carries the role, the last the finish reason; when the client asked for usage
        (``stream_options.include_usage``) an event with no choices and the ``usage`` follows, as OpenAI
        sends it, before ``[DONE]``.
        """
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # No Content-Length: closing the connection ends the body.
        self.end_headers()
        self.close_connection = True
        chunk = {**base, "object": "chat.completion.chunk"}
        steps: list[tuple[dict[str, Any], str | None]] = [({"role": "assistant"}, None)]
        steps += [(delta, None) for delta in deltas] + [({}, finish_reason)]
        for index, (delta, finish) in enumerate(steps):
            if 0 < index < len(steps) - 1:
                self._pause("token_delay", 1)
            self._send_event(json.dumps({**chunk, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))
        if counts is not None:
            self._send_event(json.dumps({**chunk, "choices": [], "usage": counts}))
        self._send_event("[DONE]")

    def _send_event(self, data: str) -> None:
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _send_json(self, status: HTTPStatus, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        if self.record is not None and status >= 400:
            self.record.error = payload["error"]["message"]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_response(self, code: int, message: str | None = None) -> None:
        if self.record is not None:
            self.record.status = int(code)
        super().send_response(code, message)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol errors that http.server detects itself still answer in the OpenAI format."""
        self.close_connection = True
        self._send_json(HTTPStatus(code), error_body(message or HTTPStatus(code).phrase))

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log(f"{self.command or '-'} {getattr(self, 'path', '-')} {int(code) if isinstance(code, int) else code}")

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: log_request already gives the one line per request."""


class Server(ThreadingHTTPServer):
    """Carries the model name and delays to handlers, and turns client hang-ups into one log line."""

    model = ""
    tracing = Tracing([])
    prompt_token_delay = 0.0
    token_delay = 0.0

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            log(f"connection error from {client_address[0]}: {sys.exc_info()[1]}")
        else:
            super().handle_error(request, client_address)


def load_model(name: str, delay: float) -> None:
    """Simulate loading weights, so launchers exercise their readiness polling and progress output."""
    steps = max(1, math.ceil(delay / 0.5))
    for step in range(steps + 1):
        log(f"loading model {name} ({100 * step // steps}%)")
        if step < steps:
            time.sleep(delay / steps)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Example OpenAI-compatible server for sparkrun recipes.")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on; 0 picks a free one")
    parser.add_argument("--model", required=True, help="model name to serve and accept in requests")
    parser.add_argument("--startup-delay", type=float, default=0.0, help="seconds of simulated loading")
    parser.add_argument(
        "--prompt-token-delay", type=float, default=0.0, help="seconds per prompt token before the reply starts"
    )
    parser.add_argument("--token-delay", type=float, default=0.0, help="seconds per generated token")
    args = parser.parse_args(argv)
    for option in ("startup_delay", "prompt_token_delay", "token_delay"):
        value = getattr(args, option)
        if value < 0 or not math.isfinite(value):
            parser.error(f"--{option.replace('_', '-')} must be a finite number >= 0")

    def on_signal(_signum: int, _frame: object) -> None:
        """Python runs this in the main thread, which wakes from time.sleep or within serve_forever's poll."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # A second signal must not interrupt the cleanup.
        raise Shutdown

    tracing = start_tracing()  # before the handlers: a SIGTERM while the SDK imports simply ends the process
    for notice in tracing.notices:
        print(notice, file=sys.stderr, flush=True)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    server: Server | None = None
    try:
        load_model(args.model, args.startup_delay)
        try:
            server = Server((args.host, args.port), Handler)
        except OSError as exc:
            print(f"cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
            return 1
        server.model, server.tracing = args.model, tracing
        server.prompt_token_delay, server.token_delay = args.prompt_token_delay, args.token_delay
        log(f"serving {args.model} on http://{args.host}:{server.server_address[1]}")
        server.serve_forever()
    except Shutdown:
        pass
    finally:
        if server is not None:
            server.server_close()
        tracing.shutdown()  # exports the spans still queued
    log("shutting down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
