"""What the example workload gives benchmark frameworks: usage, length controls, tool calls and timing.

llama-benchy needs ``usage`` at the end of a stream and replies of the length it asks for; tool-eval-bench
needs OpenAI ``tool_calls``, streamed and not, and a final answer after the tool results. The rules are
in ``examples/workloads/example_engine``; these tests pin them through real HTTP.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.example_workload_harness import MODEL, SERVER, ServerProcess, call

pytestmark = pytest.mark.integration

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get current weather for a specific location",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "units": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
            },
            "required": ["location"],
        },
    },
}
STOCK = {
    "type": "function",
    "function": {
        "name": "get_stock_price",
        "description": "Get the current stock price for a ticker symbol",
        "parameters": {"type": "object", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]},
    },
}
EMAIL = {
    "type": "function",
    "function": {
        "name": "send_email",
        "description": "Send an email to a recipient",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "subject", "body"],
        },
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    process = ServerProcess()
    try:
        process.wait_ready()
        yield process
    finally:
        process.stop()


def complete(server: ServerProcess, content: str | list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """A non-streamed completion of one user message; fails the test on any status but 200."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], **fields}
    status, _, raw = call(server.url + "/v1/chat/completions", "POST", body)
    assert status == 200, raw
    return json.loads(raw)


def stream(server: ServerProcess, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks of a streamed completion, checked to end with ``[DONE]``."""
    status, headers, raw = call(server.url + "/v1/chat/completions", "POST", {"model": MODEL, "stream": True, **body})
    assert status == 200 and headers["Content-Type"] == "text/event-stream", raw
    events = raw.decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    return [json.loads(event.removeprefix("data: ")) for event in events[:-2]]


def streamed_message(chunks: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]], str]:
    """Content, tool calls and finish reason, put together from the deltas as OpenAI clients do."""
    content, calls, finish = "", [], ""
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content", "")
            for part in delta.get("tool_calls", []):
                if "id" in part:
                    calls.append({"id": part["id"], "type": part["type"], "function": dict(part["function"])})
                else:
                    calls[part["index"]]["function"]["arguments"] += part["function"]["arguments"]
            finish = choice["finish_reason"] or finish
    return content, calls, finish


def test_a_stream_ends_with_usage_when_the_client_asks(server):
    messages = [{"role": "system", "content": "one two three"}, {"role": "user", "content": "alpha beta gamma delta"}]
    plain = json.loads(call(server.url + "/v1/chat/completions", "POST", {"model": MODEL, "messages": messages})[2])
    assert plain["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    chunks = stream(server, {"messages": messages, "stream_options": {"include_usage": True}})
    *content_chunks, last = chunks
    assert last["choices"] == [] and last["usage"] == plain["usage"]
    assert last["id"] == plain["id"] and last["object"] == "chat.completion.chunk"
    assert all("usage" not in chunk for chunk in content_chunks)
    assert streamed_message(content_chunks)[0] == plain["choices"][0]["message"]["content"]
    # Without the option the stream is as before: no usage chunk.
    assert all(chunk["choices"] for chunk in stream(server, {"messages": messages}))


def test_a_llama_benchy_request_gets_exactly_the_length_it_asks_for(server):
    """What llama-benchy sends with --exact-tg: the reply runs past its natural end to max_tokens."""
    context, prompt = " ".join(f"c{i}" for i in range(40)), " ".join(f"p{i}" for i in range(8))
    body = {
        "messages": [{"role": "system", "content": context}, {"role": "user", "content": prompt}],
        "max_tokens": 32,
        "min_tokens": 32,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
    }
    chunks = stream(server, body)
    content, _, finish = streamed_message(chunks)
    assert chunks[-1]["usage"] == {"prompt_tokens": 48, "completion_tokens": 32, "total_tokens": 80}
    assert len(content.split()) == 32 and finish == "length"
    echo = ["echo:", *reversed(prompt.split())]
    assert content.split() == (echo * 4)[:32]  # the reply repeats itself from the start
    # Without --exact-tg the same request stops at the natural end of the reply.
    del body["min_tokens"], body["ignore_eos"]
    chunks = stream(server, body)
    assert streamed_message(chunks)[0].split() == echo and chunks[-1]["usage"]["completion_tokens"] == 9


@pytest.mark.parametrize(
    ("fields", "words", "finish"),
    [
        ({"max_completion_tokens": 2}, 2, "length"),
        ({"max_tokens": 4, "max_completion_tokens": 2}, 2, "length"),  # the smaller limit wins
        ({"min_tokens": 7}, 7, "stop"),
        ({"min_tokens": 2}, 3, "stop"),  # already long enough
        ({"ignore_eos": True}, 3, "stop"),  # no limit to run into
        ({"ignore_eos": True, "max_tokens": 5}, 5, "length"),
    ],
)
def test_length_controls(server, fields, words, finish):
    completion = complete(server, "b a", **fields)
    choice = completion["choices"][0]
    assert len(choice["message"]["content"].split()) == words == completion["usage"]["completion_tokens"]
    assert choice["finish_reason"] == finish


def test_content_may_be_an_array_of_text_parts(server):
    parts = [{"type": "text", "text": "red green"}, {"type": "text", "text": "blue"}]
    completion = complete(server, parts)
    assert completion["choices"][0]["message"]["content"] == "echo: blue green red"
    assert completion["usage"]["prompt_tokens"] == 3


def test_it_knows_a_few_capitals_which_llama_benchy_checks_for_coherence(server):
    completion = complete(server, "What is the capital of France? Please reply with one word only", max_tokens=100)
    assert completion["choices"][0]["message"]["content"] == "Paris."


def test_a_tool_request_gets_tool_calls_streamed_or_not(server):
    body = {"messages": [{"role": "user", "content": "What's the weather in Tokyo in Fahrenheit?"}], "tools": [WEATHER]}
    plain = json.loads(call(server.url + "/v1/chat/completions", "POST", {"model": MODEL, **body})[2])
    choice = plain["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    [tool_call] = choice["message"]["tool_calls"]
    assert tool_call["type"] == "function" and tool_call["id"].startswith("call_")
    assert tool_call["function"]["name"] == "get_weather"
    assert json.loads(tool_call["function"]["arguments"]) == {"location": "Tokyo", "units": "fahrenheit"}
    chunks = stream(server, {**body, "stream_options": {"include_usage": True}})
    content, calls, finish = streamed_message(chunks[:-1])
    assert (content, calls, finish) == ("", choice["message"]["tool_calls"], "tool_calls")
    assert chunks[-1]["usage"] == plain["usage"]
    assert plain["usage"]["completion_tokens"] == len(chunks) - 3  # one chunk per token, role and finish aside


def test_independent_requests_become_parallel_calls_unless_the_client_forbids_them(server):
    ask = "What's the weather in London and the stock price of MSFT?"
    calls = complete(server, ask, tools=[WEATHER, STOCK])["choices"][0]["message"]["tool_calls"]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"location": "London"}),
        ("get_stock_price", {"ticker": "MSFT"}),
    ]
    assert len({c["id"] for c in calls}) == 2
    single = complete(server, ask, tools=[WEATHER, STOCK], parallel_tool_calls=False)
    assert [c["function"]["name"] for c in single["choices"][0]["message"]["tool_calls"]] == ["get_weather"]


def test_after_tool_results_the_reply_restates_them(server):
    call_ = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "What's the weather in Berlin?"},
        {"role": "assistant", "content": None, "tool_calls": [call_]},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"temperature": 8, "condition": "Overcast"})},
    ]
    body = {"model": MODEL, "messages": messages, "tools": [WEATHER]}
    reply = json.loads(call(server.url + "/v1/chat/completions", "POST", body)[2])["choices"][0]
    assert reply["message"] == {
        "role": "assistant",
        "content": "get_weather returned temperature 8, condition Overcast.",
    }
    assert reply["finish_reason"] == "stop"
    messages[-1]["content"] = json.dumps({"error": "service unavailable"})
    reply = json.loads(call(server.url + "/v1/chat/completions", "POST", body)[2])["choices"][0]
    assert reply["message"]["content"] == "get_weather failed: service unavailable."


def test_tool_choice(server):
    ask = "Reply with the single word OK."
    assert (
        complete(server, ask, tools=[WEATHER])["choices"][0]["message"]["content"]
        == "echo: OK. word single the with Reply"
    )
    no_tools = complete(server, "What's the weather in Oslo?", tools=[WEATHER], tool_choice="none")
    assert no_tools["choices"][0]["message"]["content"].startswith("echo:")
    required = complete(server, ask, tools=[WEATHER, STOCK], tool_choice="required")["choices"][0]["message"]
    assert [c["function"]["name"] for c in required["tool_calls"]] == ["get_weather"]  # no match: the first tool
    assert json.loads(required["tool_calls"][0]["function"]["arguments"]) == {"location": "Reply single word OK"}
    named = {"type": "function", "function": {"name": "get_stock_price"}}
    forced = complete(server, "What's the weather in Oslo?", tools=[WEATHER, STOCK], tool_choice=named)
    assert [c["function"]["name"] for c in forced["choices"][0]["message"]["tool_calls"]] == ["get_stock_price"]


def test_a_request_missing_required_arguments_gets_a_question(server):
    reply = complete(server, "Send an email please.", tools=[EMAIL])["choices"][0]
    assert reply["message"]["content"] == "I can do that with a tool, but I need more details: send_email needs to."
    assert reply["finish_reason"] == "stop"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"min_tokens": -1}, "min_tokens"),
        ({"min_tokens": 5, "max_tokens": 4}, "min_tokens"),
        ({"ignore_eos": "yes"}, "ignore_eos"),
        ({"stream_options": []}, "stream_options"),
        ({"stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
        ({"tools": {"name": "x"}}, "tools"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools"),
        ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": [WEATHER], "parallel_tool_calls": "no"}, "parallel_tool_calls"),
    ],
)
def test_bad_options_get_an_openai_error(server, fields, param):
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **fields}
    status, _, raw = call(server.url + "/v1/chat/completions", "POST", body)
    assert status == 400
    assert json.loads(raw)["error"]["param"] == param


def test_delays_make_prefill_and_generation_take_time():
    process = ServerProcess("--prompt-token-delay", "0.05", "--token-delay", "0.05")
    try:
        process.wait_ready()
        started = time.monotonic()
        chunks = stream(process, {"messages": [{"role": "user", "content": "one two three four"}]})  # 4 + 5 tokens
        elapsed = time.monotonic() - started
    finally:
        process.stop()
    assert len(chunks) == 7
    assert elapsed >= 4 * 0.05 + 5 * 0.05  # lower bounds the server's own sleeps guarantee, however loaded


@pytest.mark.parametrize("option", ["--token-delay", "--prompt-token-delay"])
def test_a_negative_delay_is_refused(option):
    result = subprocess.run(
        [sys.executable, str(SERVER), "--model", MODEL, option, "-1"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 2 and f"{option} must be a finite number >= 0" in result.stderr
