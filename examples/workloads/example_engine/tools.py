"""Rule-based tool calling: how the example workload answers a request that offers ``tools``.

A real model reads the tools' names and descriptions and decides. This workload follows a few rules a
reader can predict, so a tool-calling benchmark finds it right on some tasks and wrong on others:

1. Routing. The last user message is split into requests at sentence ends, semicolons and the words
   "and" / "then". A request goes to the tool whose *name* shares the most keywords with it (the
   description breaks ties; a tool whose name shares none is never chosen). Keywords are lower-cased
   words minus ``STOPWORDS``, with a trailing plural "s" dropped and ``SYNONYMS`` applied
   (find -> search, temperature -> weather, ...). The distinct calls of all requests are made together,
   as parallel tool calls, unless the request sets ``parallel_tool_calls`` to false (then only the first).
2. Arguments come from the request's text, by each parameter's JSON schema: an ``enum`` value the text
   names (each value used once, in order of appearance); a number for numeric parameters; for strings,
   by the parameter's name: an upper-case ticker symbol, a capitalised place after "in"/"at"/"for"/
   "near"/"to", an e-mail address, an ISO date or an HH:MM time, an arithmetic expression, or for
   query/text-like parameters the quoted text or else the request's remaining keywords. An optional
   parameter is sent only when the text names one of its enum values. A required parameter with no
   value in the text stops that call; if no call is left, the reply asks for what is missing.
3. ``tool_choice``: "none" never calls (the caller does not ask); "auto" calls only on a match;
   "required" calls the best match, else the first tool; a named function is always the one called.
   A forced call fills a required string parameter that nothing else fills with the request's words.
4. After tool results (the last message has role "tool") the reply is the final answer: each result
   restated as "name returned key value, ..." or "name failed: error". There is never a second round.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .text import message_text

_STOPWORD_LIST = """a about all an and any are as at be been but by can could did do does for from get give how i if
    in into is it its just know let like me my need now of on or our please right s some tell that the
    their then these this those to up use using want was we were what when where which who will with
    would you your"""
STOPWORDS = frozenset(_STOPWORD_LIST.split())
SYNONYMS = {
    "calculate": "calculator",
    "compute": "calculator",
    "doc": "file",
    "document": "file",
    "execute": "run",
    "find": "search",
    "forecast": "weather",
    "look": "search",
    "lookup": "search",
    "mail": "email",
    "remind": "reminder",
    "schedule": "calendar",
    "temperature": "weather",
}
_REQUEST_BOUNDARY = re.compile(r"(?<=[.!?;])\s+|,?\s+(?:and|then)\s+", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z0-9]+")
_PLACE = re.compile(r"\b(?:in|at|for|near|to)\s+([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")
_TICKER = re.compile(r"\b[A-Z]{2,5}\b")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"")
_OPERAND = r"\d+(?:\.\d+)?\s*%?"
_EXPRESSION = re.compile(rf"{_OPERAND}(?:\s*(?:[-+*/^x]|of|times|plus|minus)\s*{_OPERAND})+")
_TEXT_PARAMETERS = frozenset(
    {"body", "content", "keywords", "message", "prompt", "q", "query", "subject", "text", "title"}
)


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it


@dataclass
class Decision:
    """What to answer: tool calls, or a text reply (a question for missing arguments, or a final answer)."""

    calls: list[ToolCall] = field(default_factory=list)
    text: str | None = None


def keywords(text: str) -> list[str]:
    """The text's keywords in order: lower-cased, stopwords dropped, plural "s" dropped, synonyms applied."""
    result = []
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS:
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        result.append(SYNONYMS.get(word, word))
    return result


class Tool:
    """One offered function, with the keyword sets routing compares a request against."""

    def __init__(self, spec: dict[str, Any]) -> None:
        function = spec["function"]
        self.name: str = function["name"]
        self.parameters: dict[str, Any] = function.get("parameters") or {}
        self.name_words = set(keywords(self.name.replace("_", " ")))
        self.description_words = set(keywords(str(function.get("description") or "")))

    def score(self, words: set[str]) -> tuple[int, int]:
        return len(words & self.name_words), len(words & self.description_words)

    def arguments(self, request: str) -> tuple[dict[str, Any], list[str]]:
        """The arguments the request's text supplies, and the required parameters it leaves unfilled."""
        properties: dict[str, Any] = self.parameters.get("properties") or {}
        required = set(self.parameters.get("required") or [])
        used: set[str] = set()  # enum values already given to a parameter
        arguments: dict[str, Any] = {}
        missing = []
        for name, schema in properties.items():
            value = self._value(name, schema if isinstance(schema, dict) else {}, request, name in required, used)
            if value is not None:
                arguments[name] = value
            elif name in required:
                missing.append(name)
        return arguments, missing

    def forced_call(self, request: str) -> ToolCall:
        """The call made when the caller insists on one: unfilled required strings get the request's words."""
        arguments, missing = self.arguments(request)
        properties = self.parameters.get("properties") or {}
        for name in missing:
            if (properties.get(name) or {}).get("type", "string") == "string":
                arguments[name] = _remaining_words(request, self.name_words | self.description_words) or request
        return _call(self, arguments)

    def _value(self, name: str, schema: dict[str, Any], request: str, required: bool, used: set[str]) -> Any:
        if isinstance(schema.get("enum"), list):
            return _enum_value(schema, request, required, used)
        if not required:
            return None
        kind, lowered = schema.get("type"), name.lower()
        if kind in ("integer", "number"):
            match = _NUMBER.search(request)
            return None if match is None else (int if kind == "integer" else float)(float(match.group()))
        if kind not in (None, "string"):
            return None
        if "ticker" in lowered or "symbol" in lowered:
            return _first(_TICKER, request)
        if any(word in lowered for word in ("location", "city", "place", "destination")):
            match = _PLACE.search(request)
            return None if match is None else match.group(1).removesuffix("'s")
        if "email" in lowered or lowered in ("to", "recipient"):
            return _first(_EMAIL, request)
        if "datetime" in lowered:
            date, time = _first(_DATE, request), _first(_TIME, request)
            return f"{date}T{time}" if date and time else None
        if "date" in lowered:
            return _first(_DATE, request)
        if "time" in lowered:
            return _first(_TIME, request)
        if "expression" in lowered:
            return _first(_EXPRESSION, request)
        if lowered in _TEXT_PARAMETERS:
            quoted = _QUOTED.search(request)
            if quoted:
                return quoted.group(1) or quoted.group(2)
            return _remaining_words(request, self.name_words | self.description_words) or request.strip()
        return None


def _remaining_words(request: str, own: set[str]) -> str:
    """The request's words that are neither stopwords nor keywords of the tool itself."""
    kept = []
    for word in _WORD.findall(request):
        normal = keywords(word)
        if normal and normal[0] not in own:
            kept.append(word)
    return " ".join(kept)


def _first(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    return None if match is None else match.group()


def _enum_value(schema: dict[str, Any], request: str, required: bool, used: set[str]) -> Any:
    """The first enum value the text names that no other parameter took; for a required one, else its default."""
    named = []
    for value in schema["enum"]:
        if isinstance(value, str) and value.lower() not in used:
            match = re.search(rf"(?<!\w){re.escape(value)}(?!\w)", request, re.IGNORECASE)
            if match:
                named.append((match.start(), value))
    if named:
        value = min(named)[1]
        used.add(value.lower())
        return value
    if required:
        return schema.get("default", schema["enum"][0] if schema["enum"] else None)
    return None


def decide(
    messages: list[dict[str, Any]], specs: list[dict[str, Any]], tool_choice: str, forced: str | None, parallel: bool
) -> Decision | None:
    """Tool calls or a text reply for a request that offers tools; None to answer as if there were none."""
    if messages[-1]["role"] == "tool":
        return Decision(text=final_answer(messages))
    tools = [Tool(spec) for spec in specs]
    text = message_text(next(message for message in reversed(messages) if message["role"] == "user"))
    if forced is not None:
        return Decision(calls=[next(tool for tool in tools if tool.name == forced).forced_call(text)])
    calls: list[ToolCall] = []
    missing: dict[str, list[str]] = {}
    for request in (part for part in _REQUEST_BOUNDARY.split(text) if part.strip()):
        tool = route(request, tools)
        if tool is None:
            continue
        arguments, lacking = tool.arguments(request)
        if lacking:
            missing.setdefault(tool.name, lacking)
        elif (call := _call(tool, arguments)) not in calls:
            calls.append(call)
    if calls:
        return Decision(calls=calls if parallel else calls[:1])
    if tool_choice == "required":
        return Decision(calls=[(route(text, tools) or tools[0]).forced_call(text)])
    if missing:
        wanted = "; ".join(f"{name} needs {', '.join(params)}" for name, params in missing.items())
        return Decision(text=f"I can do that with a tool, but I need more details: {wanted}.")
    return None


def route(request: str, tools: list[Tool]) -> Tool | None:
    """The tool whose name shares the most keywords with the request (description breaks ties), if any shares one."""
    words = set(keywords(request))
    scored = [(tool.score(words), -index, tool) for index, tool in enumerate(tools)]
    best = max(scored, key=lambda item: item[:2], default=None)
    return best[2] if best is not None and best[0][0] > 0 else None


def _call(tool: Tool, arguments: dict[str, Any]) -> ToolCall:
    return ToolCall(tool.name, json.dumps(arguments, ensure_ascii=False))


def final_answer(messages: list[dict[str, Any]]) -> str:
    """Each tool result since the last assistant turn, restated as text."""
    start = max((i for i, message in enumerate(messages) if message["role"] == "assistant"), default=-1) + 1
    calls = {
        call.get("id"): (call.get("function") or {}).get("name")
        for message in messages
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or []
    }
    sentences = []
    for message in messages[start:]:
        if message["role"] != "tool":
            continue
        name = message.get("name") or calls.get(message.get("tool_call_id")) or "the tool"
        try:
            result = json.loads(message_text(message))
        except ValueError:
            result = message_text(message)
        if isinstance(result, dict) and result.get("error"):
            sentences.append(f"{name} failed: {_flatten(result['error'])}.")
        else:
            sentences.append(f"{name} returned {_flatten(result) or 'nothing'}.")
    return " ".join(sentences)


def _flatten(value: Any) -> str:
    """A JSON value as plain text: "key value" pairs joined by commas, lists item by item."""
    if isinstance(value, dict):
        parts = (f"{key} {_flatten(item)}".strip() for key, item in value.items() if item not in (None, "", [], {}))
        return ", ".join(parts)
    if isinstance(value, list):
        return "; ".join(_flatten(item) for item in value)
    return str(value)
