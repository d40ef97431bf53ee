"""The daemon's HTTP API (Starlette): jobs, prompts, the two streams and metrics.

Every endpoint but ``GET /v1/health`` needs ``Authorization: Bearer <token>``
(compared in constant time). Handlers are plain module functions that find
the daemon's parts on ``request.app.state``; the project's own errors become
responses through Starlette's exception handlers, and anything unexpected is
a 500 logged once per kind of failure (:mod:`sparkrun.daemon.middleware`).
What clients send is read and checked by :mod:`sparkrun.daemon.http_input`.
What a request reads from the journal or from disk is read off the event
loop.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from sparkrun import __version__
from sparkrun.core.deployments import DeploymentStore
from sparkrun.core.names import check_name
from sparkrun.daemon.http_input import (
    BodyTimeout,
    BodyTooLarge,
    ClientGone,
    JSONResponse,
    cursor_of,
    error_response,
    flag_of,
    job_id_of,
    read_body,
)
from sparkrun.daemon.jobs import JobConflict, JobManager, PromptError
from sparkrun.daemon.journal import CursorExpired, UnknownJob
from sparkrun.daemon.log_limits import RateLimitedLog
from sparkrun.daemon.middleware import BearerAuth, Contained
from sparkrun.daemon.operations import UnknownOperation
from sparkrun.daemon.sse import CountedStream, event_stream, host_log_stream, log_stream
from sparkrun.errors import DeploymentError

__all__ = ["DaemonSettings", "StreamSlots", "create_app"]

_limited = RateLimitedLog(logging.getLogger(__name__))
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
    #: The console's links to a trace elsewhere: {"Jaeger": base URL, "Tempo": Grafana base URL}.
    trace_links: dict[str, str] = field(default_factory=dict)


class StreamSlots:
    """How many event and log streams are open (shared with the metrics)."""

    def __init__(self) -> None:
        self.active = 0


# -- request parts -------------------------------------------------------------------------


def _manager(request: Request) -> JobManager:
    manager: JobManager = request.app.state.manager  # set by create_app
    return manager


def _settings(request: Request) -> DaemonSettings:
    settings: DaemonSettings = request.app.state.settings  # set by create_app
    return settings


async def _body(request: Request, shape: str) -> dict[str, Any]:
    settings = _settings(request)
    return await read_body(request, shape, max_bytes=settings.max_body_bytes, timeout=settings.body_timeout)


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
    job_id = job_id_of(request)
    job = await manager.read(manager.journal.job, job_id)
    if job is None:
        raise UnknownJob(job_id)
    return JSONResponse({**job.to_json(), "prompts": manager.prompts(job_id)})


async def cancel(request: Request) -> Response:
    return JSONResponse((await _manager(request).cancel(job_id_of(request))).to_json())


async def prompts(request: Request) -> Response:
    manager = _manager(request)
    job_id = job_id_of(request)
    if await manager.read(manager.journal.job, job_id) is None:
        raise UnknownJob(job_id)
    return JSONResponse({"prompts": manager.prompts(job_id)})


async def answer(request: Request) -> Response:
    job_id = job_id_of(request)
    payload = await _body(request, "with an answer")
    if "answer" not in payload:
        raise ValueError("the body must be a JSON object with an answer")
    await _manager(request).answer(job_id, request.path_params["prompt_id"], payload["answer"])
    return JSONResponse({"answered": request.path_params["prompt_id"]})


def _counted(request: Request, content: Any) -> Response:
    """A stream holding one subscriber slot from now until it is finished or abandoned."""
    streams, limit = request.app.state.streams, _settings(request).max_streams
    if streams.active >= limit:
        response = error_response(429, f"too many event streams (limit={limit})", retry_after=1)
        response.headers["Retry-After"] = "1"
        return response
    streams.active += 1

    def release() -> None:
        streams.active -= 1

    return CountedStream(content, release)


async def events(request: Request) -> Response:
    manager, settings = _manager(request), _settings(request)
    job_id = job_id_of(request)
    cursor = cursor_of(request)
    follow = flag_of(request, "follow", True)
    if cursor is None:  # "from the oldest retained event": a trimmed start is an in-band gap, never a 410
        if await manager.read(manager.journal.job, job_id) is None:
            raise UnknownJob(job_id)
    else:
        try:
            await manager.read(manager.journal.read, job_id, after=cursor, limit=1)
        except CursorExpired as error:
            return error_response(410, "the cursor has expired", first_retained=error.first_retained, after=cursor)
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
    follow = flag_of(request, "follow", True)
    deployment = await manager.read(DeploymentStore(manager.state_dir).load, name)
    if deployment is None:
        return error_response(404, f"no deployment with this name (deployment={name!r})")
    if any(placement.ssh is not None for placement in deployment.placements):
        lines = functools.partial(_host_lines, manager, deployment, int(tail) if tail is not None else None, follow)
        return _counted(request, host_log_stream(deployment, lines, keepalive=_settings(request).keepalive_seconds))
    stream = log_stream(
        manager,
        deployment,
        int(tail) if tail is not None else None,
        follow=follow,
        keepalive=_settings(request).keepalive_seconds,
    )
    return _counted(request, stream)


def _host_lines(
    manager: JobManager, deployment: Any, tail: int | None, follow: bool, cancel: threading.Event
) -> Iterator[str]:
    """Every host's lines (``[host]``-marked when there are several), read over their SSH connections."""
    from sparkrun.config import Config
    from sparkrun.core.executors import Executors
    from sparkrun.core.host_lines import merge_lines

    executors = Executors(Config(state_dir=manager.state_dir))
    sources = [
        (p.host, executors.for_placement(p).logs(p, tail=tail, follow=follow, cancel=cancel))
        for p in deployment.placements
    ]
    return sources[0][1] if len(sources) == 1 else merge_lines(sources)


async def prometheus(request: Request) -> Response:
    render = request.app.state.metrics
    if render is None:
        return error_response(404, "metrics are disabled for this daemon (--no-metrics)")
    body = await _manager(request).read(render)
    return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8")


# -- errors --------------------------------------------------------------------------------


async def _bad_request(request: Request, error: Exception) -> Response:
    return error_response(400, str(error))


async def _not_found(request: Request, error: Exception) -> Response:
    if isinstance(error, UnknownJob):
        return error_response(404, f"unknown job (job_id={error.job_id})")
    return error_response(404, str(error))


async def _conflict(request: Request, error: Exception) -> Response:
    return error_response(409, str(error))


async def _too_large(request: Request, error: Exception) -> Response:
    limit = _settings(request).max_body_bytes
    return error_response(413, f"the body is too large (bytes={getattr(error, 'size', 0)}, limit={limit})")


async def _timed_out(request: Request, error: Exception) -> Response:
    seconds = _settings(request).body_timeout
    response = error_response(408, f"the request body did not arrive in time (limit={seconds:g} s)")
    response.headers["Connection"] = "close"
    return response


async def _gone(request: Request, error: Exception) -> Response:
    path = request.url.path
    _limited(logging.WARNING, f"gone {path}", f"a client left before sending its whole request body (path={path})")
    return Response(status_code=400)  # nobody reads it


async def _http(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    return error_response(error.status_code, error.detail)


_HANDLERS = {
    ValueError: _bad_request,
    UnknownOperation: _bad_request,
    DeploymentError: _bad_request,
    UnknownJob: _not_found,
    PromptError: _not_found,
    JobConflict: _conflict,
    BodyTooLarge: _too_large,
    BodyTimeout: _timed_out,
    ClientGone: _gone,
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


def create_app(
    manager: JobManager,
    settings: DaemonSettings,
    *,
    slots: StreamSlots | None = None,
    metrics: Any = None,
) -> ASGIApp:
    """The ASGI application of one daemon; ``metrics`` renders ``GET /metrics`` when given."""
    from sparkrun.daemon.console import ROUTES as CONSOLE
    from sparkrun.daemon.console import Sessions

    app = Starlette(routes=[*ROUTES, *CONSOLE], exception_handlers=_HANDLERS)
    sessions = Sessions(settings.token)
    app.state.sessions = sessions
    app.state.manager = manager
    app.state.settings = settings
    app.state.streams = slots if slots is not None else StreamSlots()
    app.state.metrics = metrics
    return Contained(BearerAuth(app, settings.token, sessions))
