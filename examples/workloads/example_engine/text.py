"""The token rule and the plain (tool-free) replies.

Token rule: one token per whitespace-separated word (``str.split()``). It is deterministic, easy to
check by hand, and a word-level tokenizer that splits on whitespace counts exactly the same, so a
benchmark that counts prompt tokens locally (llama-benchy with the tokenizer built by
``examples/benchmarks/make_tokenizer.py``) agrees with the server's ``usage`` to the token.

Replies: a question about the capital of a country in ``CAPITALS`` is answered with the city (enough
for llama-benchy's coherence check, which asks for the capital of France); every other message gets
the echo, ``echo:`` followed by the message's words in reverse order.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

CAPITALS = {
    "australia": "Canberra",
    "canada": "Ottawa",
    "egypt": "Cairo",
    "france": "Paris",
    "germany": "Berlin",
    "italy": "Rome",
    "japan": "Tokyo",
    "kenya": "Nairobi",
    "norway": "Oslo",
    "portugal": "Lisbon",
    "spain": "Madrid",
}
_CAPITAL_QUESTION = re.compile(r"\bcapital\s+(?:city\s+)?of\s+([a-z]+)", re.IGNORECASE)


def count_tokens(text: str) -> int:
    """The token rule: every whitespace-separated word is one token."""
    return len(text.split())


def message_text(message: dict[str, Any]) -> str:
    """A message's text: its string content, or the text parts of a content array joined by spaces."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(part["text"] for part in content if part.get("type") == "text")
    return ""


def prompt_tokens(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    """Tokens of every message's text and tool calls, plus the tool definitions, as an engine counts them."""
    total = sum(count_tokens(message_text(message)) for message in messages)
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            total += count_tokens(f"{function.get('name', '')} {function.get('arguments', '')}")
    if tools:
        total += sum(count_tokens(json.dumps(tool)) for tool in tools)
    return total


def answer_words(text: str) -> list[str]:
    """The words of the reply to a user message: a capital city it knows, otherwise the echo."""
    match = _CAPITAL_QUESTION.search(text)
    if match and match.group(1).lower() in CAPITALS:
        return [CAPITALS[match.group(1).lower()] + "."]
    return ["echo:", *reversed(text.split())]


def stretch(words: list[str], min_tokens: int) -> list[str]:
    """At least ``min_tokens`` words: a reply shorter than that carries on by repeating its words from the start.

    This is what ``min_tokens`` and ``ignore_eos`` (vLLM's extensions, which llama-benchy sends with
    ``--exact-tg``) ask of an engine: keep generating past the natural end of the reply.
    """
    if not words or len(words) >= min_tokens:
        return words
    return list(itertools.islice(itertools.cycle(words), min_tokens))
