"""Reading what a client sent: path and query values, and a body within its limits.

Every value is checked where it is read, and a bad one raises ``ValueError``
naming it (the app answers 400). A body is read with a size limit (413), a
time limit (408) and must be strict JSON; a client that leaves in the middle
of its body is noticed, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from sparkrun.core import strict_json

__all__ = [
    "BodyTimeout",
    "BodyTooLarge",
    "ClientGone",
    "JSONResponse",
    "cursor_of",
    "error_response",
    "flag_of",
    "job_id_of",
    "read_body",
]

_JOB_ID = re.compile(r"[0-9a-f]{32}")


class JSONResponse(Response):
    """Strict, ASCII-only JSON, so any stored value renders for every client."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return strict_json.dumps(content).encode("ascii")


class BodyTooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


class BodyTimeout(Exception):
    pass


class ClientGone(Exception):
    pass


def error_response(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def job_id_of(request: Request) -> str:
    job_id: str = request.path_params["job_id"]  # the route's {job_id}: always a string
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"malformed job id (job_id={job_id[:80]!r}, expected 32 lowercase hex characters)")
    return job_id


def cursor_of(request: Request) -> int | None:
    """The client's cursor (``Last-Event-ID``, else ``?after``), or None when it gave none."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ValueError(f"the cursor must be a non-negative integer (after={raw[:40]!r})")
    return int(raw)


def flag_of(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError(f"{name} must be true or false ({name}={raw[:20]!r})")
    return raw.lower() in ("1", "true", "yes")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"the body holds {name}; JSON numbers must be finite")


async def read_body(request: Request, shape: str, *, max_bytes: int, timeout: float) -> dict[str, Any]:
    """The request's JSON object (``shape`` says what it holds), within the size and time limits, strict JSON."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > max_bytes:
        raise BodyTooLarge(int(declared))
    raw = bytearray()
    try:
        async with asyncio.timeout(timeout):
            async for chunk in request.stream():  # a chunked body is cut off at the limit, not read whole
                raw += chunk
                if len(raw) > max_bytes:
                    raise BodyTooLarge(len(raw))
    except TimeoutError:
        raise BodyTimeout() from None
    except ClientDisconnect:
        raise ClientGone() from None
    try:
        payload = json.loads(raw or b"{}", parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise ValueError(f"the body is not JSON ({error.msg} at column {error.colno})") from None
    except RecursionError:
        raise ValueError("the body is nested too deeply to read") from None
    except UnicodeDecodeError:
        raise ValueError("the body is not UTF-8 text") from None
    if not isinstance(payload, dict):
        raise ValueError(f"the body must be a JSON object {shape}")
    for key, value in payload.items():
        problem = strict_json.problem(value, key)
        if problem:
            raise ValueError(problem)
    return payload
