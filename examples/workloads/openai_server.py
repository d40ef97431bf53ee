"""A minimal OpenAI-compatible inference server that sparkrun recipes launch as an example workload.

It stands in for a real engine (vLLM, llama.cpp, ...) in examples and integration tests: it speaks the
same HTTP surface (``/health``, ``/v1/models``, ``/v1/chat/completions`` with and without streaming),
takes a while to "load" like a real model, logs one line per request and stops cleanly on SIGTERM.
Replies are deterministic -- ``echo:`` followed by the words of the last user message in reverse
order -- so tests can assert exact output. Standard library only, so it runs on any host with Python.

Usage:
    python examples/workloads/openai_server.py --host 127.0.0.1 --port 8000 --model NAME [--startup-delay 5]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import signal
import sys
import time
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

CREATED = 1_700_000_000  # Fixed, so identical requests give byte-identical responses.
MAX_BODY_BYTES = 1 << 20  # A chat request is small; refuse to buffer anything bigger.


class ClientError(Exception):
    """A request the client got wrong: answered with an OpenAI error body, never a traceback."""

    def __init__(self, status: HTTPStatus, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


class Shutdown(BaseException):
    """Raised in the main thread by the signal handler, so loading and serving unwind the same way."""


def log(line: str) -> None:
    """Write one whole line and flush, so a supervisor tailing stdout sees it at once."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def error_body(message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error envelope, which clients parse to show the message."""
    return {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}


def parse_chat_request(body: bytes, served_model: str) -> tuple[list[dict[str, str]], bool, int | None]:
    """Validate a chat completion request; return its messages, stream flag and max_tokens."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        raise ClientError(HTTPStatus.BAD_REQUEST, "Request body is not valid JSON.") from None
    if not isinstance(request, dict):
        raise ClientError(HTTPStatus.BAD_REQUEST, "Request body must be a JSON object.")
    messages = request.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ClientError(HTTPStatus.BAD_REQUEST, "'messages' must be a non-empty array.", "messages")
    for index, message in enumerate(messages):
        fields = (message.get("role"), message.get("content")) if isinstance(message, dict) else (None, None)
        if not all(isinstance(field, str) for field in fields):
            param = f"messages[{index}]"
            raise ClientError(HTTPStatus.BAD_REQUEST, f"{param} needs a string 'role' and 'content'.", param)
    if not any(message["role"] == "user" for message in messages):
        raise ClientError(HTTPStatus.BAD_REQUEST, "'messages' must contain a user message.", "messages")
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise ClientError(HTTPStatus.BAD_REQUEST, "'model' must be a non-empty string.", "model")
    if model != served_model:
        message = f"The model '{model}' does not exist; this server serves '{served_model}'."
        raise ClientError(HTTPStatus.NOT_FOUND, message, "model", "model_not_found")
    stream = request.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise ClientError(HTTPStatus.BAD_REQUEST, "'stream' must be a boolean.", "stream")
    max_tokens = request.get("max_tokens")
    if max_tokens is not None and (type(max_tokens) is not int or max_tokens < 1):
        raise ClientError(HTTPStatus.BAD_REQUEST, "'max_tokens' must be a positive integer.", "max_tokens")
    return messages, bool(stream), max_tokens


def complete(messages: list[dict[str, str]], max_tokens: int | None) -> tuple[list[str], str]:
    """The reply's words and finish reason; it depends on the last user message only."""
    last_user = next(message for message in reversed(messages) if message["role"] == "user")
    words = ["echo:", *reversed(last_user["content"].split())]
    if max_tokens is not None and len(words) > max_tokens:
        return words[:max_tokens], "length"
    return words, "stop"


def completion_id(messages: list[dict[str, str]]) -> str:
    """Derived from the messages rather than random, so identical requests get identical bodies."""
    canonical = json.dumps(messages, sort_keys=True, separators=(",", ":"))
    return "chatcmpl-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


class Handler(BaseHTTPRequestHandler):
    """Routes the OpenAI subset; every answer, errors included, is JSON or Server-Sent Events."""

    protocol_version = "HTTP/1.1"
    server_version = "sparkrun-example/1.0"

    @property
    def model(self) -> str:
        return self.server.model  # type: ignore[attr-defined]

    def _dispatch(self) -> None:
        routes = {
            "/health": {"GET": self._health},
            "/v1/models": {"GET": self._models},
            "/v1/chat/completions": {"POST": self._chat},
        }
        path = urlsplit(self.path).path
        try:
            body = self._read_body()  # Always consumed, so a kept-alive connection stays in step.
            methods = routes.get(path)
            if methods is None:
                raise ClientError(HTTPStatus.NOT_FOUND, f"Invalid URL ({self.command} {path}).")
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
        messages, stream, max_tokens = parse_chat_request(body, self.model)
        words, finish_reason = complete(messages, max_tokens)
        base = {"id": completion_id(messages), "object": "chat.completion", "created": CREATED, "model": self.model}
        if stream:
            self._stream(base, words, finish_reason)
            return
        reply = {"role": "assistant", "content": " ".join(words)}
        prompt_tokens = sum(len(message["content"].split()) for message in messages)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(words)}
        usage["total_tokens"] = prompt_tokens + len(words)
        choice = {"index": 0, "message": reply, "finish_reason": finish_reason}
        self._send_json(HTTPStatus.OK, {**base, "choices": [choice], "usage": usage})

    def _stream(self, base: dict[str, Any], words: list[str], finish_reason: str) -> None:
        """One SSE event per word, flushed at once, as a token-streaming engine sends them."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # No Content-Length: closing the connection ends the body.
        self.end_headers()
        self.close_connection = True
        for delta, finish in chunks(words, finish_reason):
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            self._send_event(json.dumps({**base, "object": "chat.completion.chunk", "choices": [choice]}))
        self._send_event("[DONE]")

    def _send_event(self, data: str) -> None:
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _send_json(self, status: HTTPStatus, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Protocol errors that http.server detects itself still answer in the OpenAI format."""
        self.close_connection = True
        self._send_json(HTTPStatus(code), error_body(message or HTTPStatus(code).phrase))

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        log(f"{self.command or '-'} {getattr(self, 'path', '-')} {int(code) if isinstance(code, int) else code}")

    def log_message(self, format: str, *args: Any) -> None:
        """Silenced: log_request already gives the one line per request."""


def chunks(words: list[str], finish_reason: str) -> Iterator[tuple[dict[str, str], str | None]]:
    """The (delta, finish_reason) pairs of a streamed reply, in OpenAI's order."""
    yield {"role": "assistant"}, None
    for index, word in enumerate(words):
        yield {"content": word if index == 0 else " " + word}, None
    yield {}, finish_reason


class Server(ThreadingHTTPServer):
    """Carries the model name to handlers, and turns client hang-ups into one log line."""

    model = ""

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
    args = parser.parse_args(argv)
    if args.startup_delay < 0 or not math.isfinite(args.startup_delay):
        parser.error("--startup-delay must be a finite number >= 0")

    def on_signal(_signum: int, _frame: object) -> None:
        """Python runs this in the main thread, which wakes from time.sleep or within serve_forever's poll."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)  # A second signal must not interrupt the cleanup.
        raise Shutdown

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
        server.model = args.model
        log(f"serving {args.model} on http://{args.host}:{server.server_address[1]}")
        server.serve_forever()
    except Shutdown:
        pass
    finally:
        if server is not None:
            server.server_close()
    log("shutting down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
