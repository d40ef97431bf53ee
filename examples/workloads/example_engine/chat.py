"""Chat completion requests: validation, the reply as one delta per token, and usage.

A reply is built once as a list of OpenAI ``delta`` objects, one per token (a content word, a tool
call's name, or a whitespace-separated piece of its JSON arguments). A streamed response sends them one
event each; a plain response merges them into a message (``assemble``), so the two always agree, and
``completion_tokens`` is the number of deltas.

Length controls, as vLLM understands them:

- ``max_tokens`` / ``max_completion_tokens`` (the smaller, if both) cut the reply; ``finish_reason``
  becomes ``length``;
- ``min_tokens`` makes a shorter plain reply carry on, repeating its words, to at least that length;
- ``ignore_eos: true`` means the reply never ends on its own: it runs into ``max_tokens``.

llama-benchy's ``--exact-tg`` sends ``min_tokens`` and ``ignore_eos``; its ``return_token_ids`` is
ignored (it then counts tokens from the stream's ``usage``, which ``stream_options.include_usage``
requests).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from . import text, tools

_CALL_ARGUMENT_PIECE = re.compile(r"\S+\s*")


class ClientError(Exception):
    """A request the client got wrong: answered with an OpenAI error body, never a traceback."""

    def __init__(self, status: HTTPStatus, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def _bad(message: str, param: str | None = None) -> ClientError:
    return ClientError(HTTPStatus.BAD_REQUEST, message, param)


@dataclass
class ChatRequest:
    messages: list[dict[str, Any]]
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    min_tokens: int = 0
    ignore_eos: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: str = "auto"  # auto, none or required; "required" too when a function is named
    forced_tool: str | None = None
    parallel_tool_calls: bool = True


def parse_chat_request(body: bytes, served_model: str) -> ChatRequest:
    """Validate a chat completion request; unknown fields (sampling options and the like) are ignored."""
    try:
        request = json.loads(body)
    except (ValueError, RecursionError):
        raise _bad("Request body is not valid JSON.") from None
    if not isinstance(request, dict):
        raise _bad("Request body must be a JSON object.")
    messages = _messages(request.get("messages"))
    model = request.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("'model' must be a non-empty string.", "model")
    if model != served_model:
        message = f"The model '{model}' does not exist; this server serves '{served_model}'."
        raise ClientError(HTTPStatus.NOT_FOUND, message, "model", "model_not_found")
    parsed = ChatRequest(messages, stream=_flag(request, "stream"), ignore_eos=_flag(request, "ignore_eos"))
    options = request.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("'stream_options' must be an object.", "stream_options")
    parsed.include_usage = _flag(options or {}, "include_usage", "stream_options.include_usage")
    limits = [_count(request, name, minimum=1) for name in ("max_tokens", "max_completion_tokens")]
    parsed.max_tokens = min((limit for limit in limits if limit is not None), default=None)
    parsed.min_tokens = _count(request, "min_tokens", minimum=0) or 0
    if parsed.max_tokens is not None and parsed.min_tokens > parsed.max_tokens:
        raise _bad("'min_tokens' must not exceed 'max_tokens'.", "min_tokens")
    _parse_tools(request, parsed)
    return parsed


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array.", "messages")
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"{param} needs a string 'role'.", param)
        content = message.get("content")
        calls = message.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(isinstance(call, dict) for call in calls)):
            raise _bad(f"{param}.tool_calls must be an array of objects.", param)
        if content is None and message["role"] == "assistant" and calls:
            continue  # an assistant turn that only called tools
        if isinstance(content, list) and all(_is_part(part) for part in content):
            continue
        if not isinstance(content, str):
            raise _bad(f"{param} needs a string 'content' (or an array of text parts).", param)
    if not any(message["role"] == "user" for message in messages):
        raise _bad("'messages' must contain a user message.", "messages")
    return messages


def _is_part(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("type"), str) and isinstance(part.get("text", ""), str)


def _flag(request: dict[str, Any], name: str, param: str | None = None) -> bool:
    value = request.get(name)
    if value is not None and not isinstance(value, bool):
        raise _bad(f"'{param or name}' must be a boolean.", param or name)
    return bool(value)


def _count(request: dict[str, Any], name: str, minimum: int) -> int | None:
    value = request.get(name)
    if value is not None and (type(value) is not int or value < minimum):
        kind = "a positive" if minimum > 0 else "a non-negative"
        raise _bad(f"'{name}' must be {kind} integer.", name)
    return value


def _parse_tools(request: dict[str, Any], parsed: ChatRequest) -> None:
    offered = request.get("tools")
    if offered is not None:
        if not isinstance(offered, list) or not all(_is_tool(tool) for tool in offered):
            raise _bad("'tools' must be an array of {type: function, function: {name, ...}} objects.", "tools")
        parsed.tools = offered or None
    names = [tool["function"]["name"] for tool in parsed.tools or []]
    choice = request.get("tool_choice")
    if isinstance(choice, dict):
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if name not in names:
            raise _bad("'tool_choice' names a function that is not in 'tools'.", "tool_choice")
        parsed.tool_choice, parsed.forced_tool = "required", name
    elif choice in ("auto", "none", "required"):
        if choice == "required" and not names:
            raise _bad("'tool_choice' is 'required' but no tools were given.", "tool_choice")
        parsed.tool_choice = choice
    elif choice is not None:
        raise _bad("'tool_choice' must be 'auto', 'none', 'required' or a named function.", "tool_choice")
    if request.get("parallel_tool_calls") is not None:
        parsed.parallel_tool_calls = _flag(request, "parallel_tool_calls")


def _is_tool(tool: Any) -> bool:
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        return False
    name = tool["function"].get("name")
    return isinstance(name, str) and bool(name)


def completion_id(messages: list[dict[str, Any]]) -> str:
    """Derived from the messages rather than random, so identical requests get identical bodies."""
    canonical = json.dumps(messages, sort_keys=True, separators=(",", ":"))
    return "chatcmpl-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]


def reply_deltas(request: ChatRequest, reply_id: str) -> tuple[list[dict[str, Any]], str]:
    """The reply as one delta per token, and its finish reason."""
    decision = None
    if request.tools and request.tool_choice != "none":
        choice, forced, parallel = request.tool_choice, request.forced_tool, request.parallel_tool_calls
        decision = tools.decide(request.messages, request.tools, choice, forced, parallel)
    if decision is not None and decision.calls:
        deltas = _call_deltas(decision.calls, reply_id)
    else:
        if decision is not None and decision.text is not None:
            words = decision.text.split()
        else:
            last_user = next(message for message in reversed(request.messages) if message["role"] == "user")
            words = text.answer_words(text.message_text(last_user))
        if request.ignore_eos and request.max_tokens is not None:
            words = text.stretch(words, request.max_tokens + 1)  # no natural end: it runs into the limit
        else:
            words = text.stretch(words, request.min_tokens)
        deltas = [{"content": word if index == 0 else " " + word} for index, word in enumerate(words)]
    if request.max_tokens is not None and len(deltas) > request.max_tokens:
        return deltas[: request.max_tokens], "length"
    return deltas, "tool_calls" if decision is not None and decision.calls else "stop"


def _call_deltas(calls: list[tools.ToolCall], reply_id: str) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = []
    for index, call in enumerate(calls):
        call_id = f"call_{reply_id.removeprefix('chatcmpl-')}_{index}"
        function = {"name": call.name, "arguments": ""}
        deltas.append({"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": function}]})
        for piece in _CALL_ARGUMENT_PIECE.findall(call.arguments):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def assemble(deltas: list[dict[str, Any]]) -> dict[str, Any]:
    """The assistant message that a list of deltas streams, as a non-streamed response carries it."""
    content = "".join(delta.get("content", "") for delta in deltas)
    calls: list[dict[str, Any]] = []
    for delta in deltas:
        for part in delta.get("tool_calls", []):
            if "id" in part:
                calls.append({"id": part["id"], "type": "function", "function": dict(part["function"])})
            else:
                calls[part["index"]]["function"]["arguments"] += part["function"]["arguments"]
    message: dict[str, Any] = {"role": "assistant", "content": content if content or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def usage(request: ChatRequest, deltas: list[dict[str, Any]]) -> dict[str, int]:
    prompt = text.prompt_tokens(request.messages, request.tools)
    return {"prompt_tokens": prompt, "completion_tokens": len(deltas), "total_tokens": prompt + len(deltas)}
