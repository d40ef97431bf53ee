"""The daemon's HTTP API (Starlette): jobs, prompts, the two streams and metrics.

Every endpoint but ``GET /v1/health`` needs ``Authorization: Bearer <token>``
(compared in constant time). Handlers are plain module functions that find
the daemon's parts on ``request.app.state``; the project's own errors become
responses through Starlette's exception handlers, and anything unexpected is
a 500 logged once per kind of failure, so a misbehaving client cannot flood
the log. Bodies are read with a size limit and a time limit, and must be
strict JSON. What a request reads from the journal or from disk is read off
the event loop.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sparkrun import __version__
from sparkrun.core import strict_json
from sparkrun.core.deployments import DeploymentStore
from sparkrun.core.names import check_name
from sparkrun.daemon.jobs import JobConflict, JobManager, PromptError
from sparkrun.daemon.journal import CursorExpired, UnknownJob
from sparkrun.daemon.log_limits import RateLimitedLog
from sparkrun.daemon.operations import UnknownOperation
from sparkrun.daemon.sse import CountedStream, event_stream, log_stream
from sparkrun.errors import DeploymentError

__all__ = ["DaemonSettings", "StreamSlots", "create_app"]

_log = logging.getLogger(__name__)
_limited = RateLimitedLog(_log)
_JOB_ID = re.compile(r"[0-9a-f]{32}")
_MAX_TAIL = 100_000


@dataclass(frozen=True)
class DaemonSettings:
    token: str
    max_body_bytes: int = 64 * 1024
    #: Seconds a client has to send a whole request body once its headers arrived.
    body_timeout: float = 10.0
    max_streams: int = 64
    keepalive_seconds: float = 15.0
    replay_batch: int = 1000


class StreamSlots:
    """How many event and log streams are open (shared with the metrics)."""

    def __init__(self) -> None:
        self.active = 0


class JSONResponse(Response):
    """Strict, ASCII-only JSON, so any stored value renders for every client."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return strict_json.dumps(content).encode("ascii")


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


class _BodyTimeout(Exception):
    pass


class _ClientGone(Exception):
    pass


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


# -- request parts -------------------------------------------------------------------------


def _manager(request: Request) -> JobManager:
    return request.app.state.manager


def _settings(request: Request) -> DaemonSettings:
    return request.app.state.settings


def _job_id(request: Request) -> str:
    job_id = request.path_params["job_id"]
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"malformed job id (job_id={job_id[:80]!r}, expected 32 lowercase hex characters)")
    return job_id


def _cursor(request: Request) -> int | None:
    """The client's cursor (``Last-Event-ID``, else ``?after``), or None when it gave none."""
    raw = request.headers.get("last-event-id") or request.query_params.get("after")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ValueError(f"the cursor must be a non-negative integer (after={raw[:40]!r})")
    return int(raw)


def _flag(request: Request, name: str, default: bool) -> bool:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if raw.lower() not in ("1", "0", "true", "false", "yes", "no"):
        raise ValueError(f"{name} must be true or false ({name}={raw[:20]!r})")
    return raw.lower() in ("1", "true", "yes")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"the body holds {name}; JSON numbers must be finite")


async def _body(request: Request, shape: str) -> dict[str, Any]:
    """The request's JSON object (``shape`` says what it holds), within the size and time limits, strict JSON."""
    settings = _settings(request)
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
        raise _TooLarge(int(declared))
    raw = bytearray()
    try:
        async with asyncio.timeout(settings.body_timeout):
            async for chunk in request.stream():  # a chunked body is cut off at the limit, not read whole
                raw += chunk
                if len(raw) > settings.max_body_bytes:
                    raise _TooLarge(len(raw))
    except TimeoutError:
        raise _BodyTimeout() from None
    except ClientDisconnect:
        raise _ClientGone() from None
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


# -- handlers ------------------------------------------------------------------------------


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok", "version": __version__})


async def submit(request: Request) -> Response:
    payload = await _body(request, "with operation and arguments")
    job = await _manager(request).submit(payload.get("operation"), payload.get("arguments"))
    location = f"/v1/jobs/{job.job_id}/events"
    return JSONResponse(
        {"job_id": job.job_id, "operation_id": job.operation_id, "events_url": location, "state": job.state},
        status_code=202,
    )


async def list_jobs(request: Request) -> Response:
    raw = request.query_params.get("limit", "100")
    if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
        raise ValueError(f"limit must be an integer from 1 to 10000 (limit={raw[:20]!r})")
    manager = _manager(request)
    jobs = await manager.read(manager.journal.jobs, limit=int(raw))
    counts = await manager.read(manager.journal.count_by_state)
    return JSONResponse({"jobs": [job.summary() for job in jobs], "counts": counts})


async def show_job(request: Request) -> Response:
    manager = _manager(request)
    job_id = _job_id(request)
    job = await manager.read(manager.journal.job, job_id)
    if job is None:
        raise UnknownJob(job_id)
    return JSONResponse({**job.to_json(), "prompts": manager.prompts(job_id)})


async def cancel(request: Request) -> Response:
    return JSONResponse((await _manager(request).cancel(_job_id(request))).to_json())


async def prompts(request: Request) -> Response:
    manager = _manager(request)
    job_id = _job_id(request)
    if await manager.read(manager.journal.job, job_id) is None:
        raise UnknownJob(job_id)
    return JSONResponse({"prompts": manager.prompts(job_id)})


async def answer(request: Request) -> Response:
    job_id = _job_id(request)
    payload = await _body(request, "with an answer")
    if "answer" not in payload:
        raise ValueError("the body must be a JSON object with an answer")
    await _manager(request).answer(job_id, request.path_params["prompt_id"], payload["answer"])
    return JSONResponse({"answered": request.path_params["prompt_id"]})


def _counted(request: Request, content: Any) -> Response:
    """A stream holding one subscriber slot from now until it is finished or abandoned."""
    streams, limit = request.app.state.streams, _settings(request).max_streams
    if streams.active >= limit:
        response = _error(429, f"too many event streams (limit={limit})", retry_after=1)
        response.headers["Retry-After"] = "1"
        return response
    streams.active += 1

    def release() -> None:
        streams.active -= 1

    return CountedStream(content, release)


async def events(request: Request) -> Response:
    manager, settings = _manager(request), _settings(request)
    job_id = _job_id(request)
    cursor = _cursor(request)
    follow = _flag(request, "follow", True)
    if cursor is None:  # "from the oldest retained event": a trimmed start is an in-band gap, never a 410
        if await manager.read(manager.journal.job, job_id) is None:
            raise UnknownJob(job_id)
    else:
        try:
            await manager.read(manager.journal.read, job_id, after=cursor, limit=1)
        except CursorExpired as error:
            return _error(410, "the cursor has expired", first_retained=error.first_retained, after=cursor)
    stream = event_stream(
        manager, job_id, cursor or 0, follow=follow, batch=settings.replay_batch, keepalive=settings.keepalive_seconds
    )
    return _counted(request, stream)


async def logs(request: Request) -> Response:
    manager = _manager(request)
    name = check_name("name", request.query_params.get("name", ""))
    tail = request.query_params.get("tail")
    if tail is not None and not (tail.isascii() and tail.isdigit() and int(tail) <= _MAX_TAIL):
        raise ValueError(f"tail must be an integer from 0 to {_MAX_TAIL} (tail={tail[:20]!r})")
    follow = _flag(request, "follow", True)
    deployment = await manager.read(DeploymentStore(manager.state_dir).load, name)
    if deployment is None:
        return _error(404, f"no deployment with this name (deployment={name!r})")
    stream = log_stream(
        manager,
        deployment,
        int(tail) if tail is not None else None,
        follow=follow,
        keepalive=_settings(request).keepalive_seconds,
    )
    return _counted(request, stream)


async def prometheus(request: Request) -> Response:
    render = request.app.state.metrics
    if render is None:
        return _error(404, "metrics are disabled for this daemon (--no-metrics)")
    body = await _manager(request).read(render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


# -- errors --------------------------------------------------------------------------------


async def _bad_request(request: Request, error: Exception) -> Response:
    return _error(400, str(error))


async def _not_found(request: Request, error: Exception) -> Response:
    if isinstance(error, UnknownJob):
        return _error(404, f"unknown job (job_id={error.job_id})")
    return _error(404, str(error))


async def _conflict(request: Request, error: Exception) -> Response:
    return _error(409, str(error))


async def _too_large(request: Request, error: Exception) -> Response:
    limit = _settings(request).max_body_bytes
    return _error(413, f"the body is too large (bytes={getattr(error, 'size', 0)}, limit={limit})")


async def _timed_out(request: Request, error: Exception) -> Response:
    seconds = _settings(request).body_timeout
    response = _error(408, f"the request body did not arrive in time (limit={seconds:g} s)")
    response.headers["Connection"] = "close"
    return response


async def _gone(request: Request, error: Exception) -> Response:
    path = request.url.path
    _limited(logging.WARNING, f"gone {path}", f"a client left before sending its whole request body (path={path})")
    return Response(status_code=400)  # nobody reads it


async def _http(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    return _error(error.status_code, error.detail)


_HANDLERS = {
    ValueError: _bad_request,
    UnknownOperation: _bad_request,
    DeploymentError: _bad_request,
    UnknownJob: _not_found,
    PromptError: _not_found,
    JobConflict: _conflict,
    _TooLarge: _too_large,
    _BodyTimeout: _timed_out,
    _ClientGone: _gone,
    HTTPException: _http,
}

ROUTES = [
    Route("/v1/health", health),
    Route("/metrics", prometheus),
    Route("/v1/jobs", submit, methods=["POST"]),
    Route("/v1/jobs", list_jobs, methods=["GET"]),
    Route("/v1/jobs/{job_id}", show_job),
    Route("/v1/jobs/{job_id}/cancel", cancel, methods=["POST"]),
    Route("/v1/jobs/{job_id}/events", events),
    Route("/v1/jobs/{job_id}/prompts", prompts),
    Route("/v1/jobs/{job_id}/prompts/{prompt_id}", answer, methods=["POST"]),
    Route("/v1/streams/logs", logs),
]


class _BearerAuth:
    """Pure ASGI middleware: rejects requests without the daemon's token (health excepted)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app, self._token = app, token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] != "/v1/health":
            header = dict(scope["headers"]).get(b"authorization", b"")
            scheme, _, given = header.partition(b" ")
            if scheme.lower() != b"bearer" or not given:
                await _error(401, "missing bearer token (header=Authorization)")(scope, receive, send)
                return
            if not hmac.compare_digest(given.strip(), self._token):
                await _error(403, "wrong bearer token (header=Authorization)")(scope, receive, send)
                return
        await self.app(scope, receive, send)


class _Contained:
    """Outermost middleware: an unexpected failure is a 500, logged once a minute per kind, never a flood."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as error:
            kind = f"{type(error).__name__} at {scope.get('path', '?')}"
            _limited(logging.ERROR, kind, f"request failed: {kind}: {error}", error)
            if not started and scope["type"] == "http":
                await _error(500, "internal error; see the daemon log")(scope, receive, send)


def create_app(
    manager: JobManager,
    settings: DaemonSettings,
    *,
    slots: StreamSlots | None = None,
    metrics: Any = None,
) -> ASGIApp:
    """The ASGI application of one daemon; ``metrics`` renders ``GET /metrics`` when given."""
    app = Starlette(routes=ROUTES, exception_handlers=_HANDLERS)  # type: ignore[arg-type]
    app.state.manager = manager
    app.state.settings = settings
    app.state.streams = slots if slots is not None else StreamSlots()
    app.state.metrics = metrics
    return _Contained(_BearerAuth(app, settings.token))
