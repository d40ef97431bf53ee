"""The example OpenAI-compatible workload, run as a real process and driven over loopback HTTP."""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.example_workload_harness import MODEL, ServerProcess, call

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = ServerProcess()
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


@pytest.fixture
def start_server() -> Iterator[Callable[..., ServerProcess]]:
    """Starts dedicated servers (for tests that stop them or time their start); always kills them."""
    started: list[ServerProcess] = []

    def start(*extra: str) -> ServerProcess:
        started.append(ServerProcess(*extra))
        return started[-1]

    try:
        yield start
    finally:
        for process in started:
            process.stop()


def chat(**overrides: Any) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "ignored earlier turn"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "the quick  brown fox"},
    ]
    return {"model": MODEL, "messages": messages, **overrides}


def test_health_and_models(server):
    status, _, body = call(server.url + "/health")
    assert status == 200 and json.loads(body) == {"status": "ok", "model": MODEL}
    status, headers, body = call(server.url + "/v1/models")
    assert status == 200 and headers["Content-Type"] == "application/json"
    models = json.loads(body)
    created = models["data"][0]["created"]
    assert isinstance(created, int)
    entry = {"id": MODEL, "object": "model", "created": created, "owned_by": "sparkrun-example"}
    assert models == {"object": "list", "data": [entry]}


def test_completion_is_deterministic_and_correct(server):
    first = call(server.url + "/v1/chat/completions", "POST", chat())
    second = call(server.url + "/v1/chat/completions", "POST", chat())
    assert first[0] == second[0] == 200
    assert first[2] == second[2]
    completion = json.loads(first[2])
    assert re.fullmatch(r"chatcmpl-[0-9a-f]{12}", completion["id"])
    assert completion["object"] == "chat.completion" and completion["model"] == MODEL
    assert isinstance(completion["created"], int)
    assert completion["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "echo: fox brown quick the"}, "finish_reason": "stop"}
    ]
    assert completion["usage"] == {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}


def test_max_tokens_truncates_with_finish_reason_length(server):
    status, _, body = call(server.url + "/v1/chat/completions", "POST", chat(max_tokens=2))
    completion = json.loads(body)
    assert status == 200
    assert completion["choices"][0]["message"]["content"] == "echo: fox"
    assert completion["choices"][0]["finish_reason"] == "length"
    assert completion["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize("max_tokens", [None, 2])
def test_streaming_matches_the_non_streaming_reply(server, max_tokens):
    expected = json.loads(call(server.url + "/v1/chat/completions", "POST", chat(max_tokens=max_tokens))[2])
    status, headers, body = call(server.url + "/v1/chat/completions", "POST", chat(stream=True, max_tokens=max_tokens))
    assert status == 200 and headers["Content-Type"] == "text/event-stream"
    events = body.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert all(event.startswith("data: ") for event in events[:-1])
    chunks = [json.loads(event.removeprefix("data: ")) for event in events[:-2]]
    assert {chunk["id"] for chunk in chunks} == {expected["id"]}
    assert {chunk["object"] for chunk in chunks} == {"chat.completion.chunk"}
    deltas = [chunk["choices"][0]["delta"] for chunk in chunks]
    finishes = [chunk["choices"][0]["finish_reason"] for chunk in chunks]
    assert deltas[0] == {"role": "assistant"} and deltas[-1] == {}
    assert finishes == [None] * (len(chunks) - 1) + [expected["choices"][0]["finish_reason"]]
    text = "".join(delta["content"] for delta in deltas[1:-1])
    assert text == expected["choices"][0]["message"]["content"]
    assert len(deltas) - 2 == expected["usage"]["completion_tokens"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "param", "code"),
    [
        ("POST", "/v1/chat/completions", b"{not json", 400, None, None),
        ("POST", "/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages", None),
        ("POST", "/v1/chat/completions", {"model": MODEL}, 400, "messages", None),
        ("POST", "/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user"}]}, 400, "messages[0]", None),
        ("POST", "/v1/chat/completions", chat(model="other-model"), 404, "model", "model_not_found"),
        ("GET", "/v1/unknown", None, 404, None, None),
        ("GET", "/v1/chat/completions", None, 405, None, None),
        ("POST", "/health", b"{}", 405, None, None),
    ],
    ids=[
        "invalid-json",
        "empty-messages",
        "no-messages",
        "bad-message",
        "wrong-model",
        "unknown-path",
        "get-chat",
        "post-health",
    ],
)
def test_bad_input_gets_an_openai_error(server, method, path, body, status, param, code):
    got, headers, raw = call(server.url + path, method, body)
    assert got == status and headers["Content-Type"] == "application/json"
    error = json.loads(raw)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["message"]
    assert (error["param"], error["code"]) == (param, code)
    if status == 405:
        assert headers["Allow"] in ("GET", "POST")
    server.wait_for_output(f"{method} {path} {status}")
    assert not any("Traceback" in line for line in server.stderr)


def test_startup_delay_postpones_readiness(start_server):
    spawned = time.monotonic()  # before the process exists: the delay lies wholly after this
    process = start_server("--startup-delay", "1")
    process.wait_for_output(f"loading model {MODEL}")
    with pytest.raises(urllib.error.URLError) as refused:
        urllib.request.urlopen(process.url + "/health", timeout=2)
    assert isinstance(refused.value.reason, ConnectionRefusedError)
    process.wait_ready()
    assert time.monotonic() - spawned >= 1  # a lower bound the server's own sleep guarantees, however loaded
    assert sum(line.startswith(f"loading model {MODEL}") for line in process.stdout) >= 2
    assert f"serving {MODEL} on {process.url}" in process.stdout


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_shuts_down_cleanly(start_server, signum):
    process = start_server()
    process.wait_ready()
    assert call(process.url + "/v1/chat/completions", "POST", b"[")[0] == 400
    process.proc.send_signal(signum)
    assert process.proc.wait(timeout=10) == 0
    process.stop()
    assert process.stdout[-1] == "shutting down"
    assert "POST /v1/chat/completions 400" in process.stdout
    assert process.stderr == []


def test_sigterm_while_loading_exits_cleanly(start_server):
    process = start_server("--startup-delay", "30")
    process.wait_for_output(f"loading model {MODEL}")
    process.proc.send_signal(signal.SIGTERM)
    assert process.proc.wait(timeout=10) == 0
    process.stop()
    assert process.stdout[-1] == "shutting down" and process.stderr == []
