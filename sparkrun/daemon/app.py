"""The daemon's HTTP API (Starlette): jobs, prompts, and the two streams.

Every endpoint but ``GET /v1/health`` needs ``Authorization: Bearer <token>``
(compared in constant time). ``GET /v1/jobs/{job_id}/events`` is a
Server-Sent Events stream whose ``id:`` is the journal sequence; it resumes
after ``Last-Event-ID`` or ``?after=N``, answers 410 with ``first_retained``
when the cursor has expired, sends an in-band ``gap`` event if that happens
mid-stream, and an ``end`` event once the job is terminal and drained.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from sparkrun import __version__
from sparkrun.daemon.jobs import JobConflict, JobManager, PromptError
from sparkrun.daemon.journal import TERMINAL_STATES, CursorExpired, UnknownJob
from sparkrun.daemon.operations import UnknownOperation

__all__ = ["DaemonSettings", "StreamSlots", "create_app"]

_JOB_ID = re.compile(r"[0-9a-f]{32}")
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(frozen=True)
class DaemonSettings:
    token: str
    max_body_bytes: int = 64 * 1024
    max_streams: int = 64
    keepalive_seconds: float = 15.0
    replay_batch: int = 1000


class StreamSlots:
    """How many event and log streams are open (shared with the metrics)."""

    def __init__(self) -> None:
        self.active = 0


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


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


def _job_id(request: Request) -> str:
    job_id = request.path_params["job_id"]
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"malformed job id (job_id={job_id[:80]!r}, expected 32 lowercase hex characters)")
    return job_id


def _cursor(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
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


def create_app(
    manager: JobManager,
    settings: DaemonSettings,
    *,
    slots: StreamSlots | None = None,
    metrics: Callable[[], bytes] | None = None,
) -> ASGIApp:
    """The ASGI application of one daemon; ``metrics`` renders ``GET /metrics`` when given."""
    journal = manager.journal
    streams = slots if slots is not None else StreamSlots()

    async def body(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise _TooLarge(int(declared))
        raw = bytearray()
        async for chunk in request.stream():  # a chunked body is cut off at the limit, not read whole
            raw += chunk
            if len(raw) > settings.max_body_bytes:
                raise _TooLarge(len(raw))
        try:
            return json.loads(raw or b"{}", parse_constant=_reject_constant)
        except json.JSONDecodeError as error:
            raise ValueError(f"the body is not JSON ({error.msg} at column {error.colno})") from None
        except RecursionError:
            raise ValueError("the body is nested too deeply to read") from None

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                return await handler(request)
            except _TooLarge as error:
                return _error(413, f"the body is too large (bytes={error.size}, limit={settings.max_body_bytes})")
            except (UnknownJob, KeyError):
                return _error(404, f"unknown job (job_id={request.path_params.get('job_id')})")
            except (UnknownOperation, PromptError) as error:
                return _error(404 if isinstance(error, PromptError) else 400, str(error))
            except JobConflict as error:
                return _error(409, str(error))
            except ValueError as error:
                return _error(400, str(error))

        return endpoint

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "version": __version__})

    async def submit(request: Request) -> Response:
        payload = await body(request)
        if not isinstance(payload, dict):
            raise ValueError("the body must be a JSON object with operation and arguments")
        job = manager.submit(payload.get("operation"), payload.get("arguments"))
        location = f"/v1/jobs/{job.job_id}/events"
        return JSONResponse(
            {"job_id": job.job_id, "operation_id": job.operation_id, "events_url": location, "state": job.state},
            status_code=202,
        )

    async def list_jobs(request: Request) -> Response:
        raw = request.query_params.get("limit", "100")
        if not raw.isdigit() or not 1 <= int(raw) <= 10_000:
            raise ValueError(f"limit must be an integer from 1 to 10000 (limit={raw[:20]!r})")
        return JSONResponse({"jobs": [job.to_json() for job in journal.jobs(limit=int(raw))]})

    async def show_job(request: Request) -> Response:
        job = journal.job(_job_id(request))
        if job is None:
            raise KeyError(request.path_params["job_id"])
        return JSONResponse({**job.to_json(), "prompts": manager.prompts(job.job_id)})

    async def cancel(request: Request) -> Response:
        return JSONResponse((await manager.cancel(_job_id(request))).to_json())

    async def prompts(request: Request) -> Response:
        job_id = _job_id(request)
        if journal.job(job_id) is None:
            raise KeyError(job_id)
        return JSONResponse({"prompts": manager.prompts(job_id)})

    async def answer(request: Request) -> Response:
        job_id = _job_id(request)
        payload = await body(request)
        if not isinstance(payload, dict) or "answer" not in payload:
            raise ValueError("the body must be a JSON object with an answer")
        await manager.answer(job_id, request.path_params["prompt_id"], payload["answer"])
        return JSONResponse({"answered": request.path_params["prompt_id"]})

    async def events(request: Request) -> Response:
        job_id = _job_id(request)
        cursor = _cursor(request)
        follow = _flag(request, "follow", True)
        if journal.job(job_id) is None:
            raise KeyError(job_id)
        try:
            journal.read(job_id, after=cursor, limit=1)
        except CursorExpired as error:
            return _error(410, "the cursor has expired", first_retained=error.first_retained, after=cursor)
        return counted_stream(_event_stream(job_id, cursor, follow))

    def counted_stream(content: AsyncIterator[str]) -> Response:
        """An SSE response holding one subscriber slot from now until it is finished or abandoned."""
        if streams.active >= settings.max_streams:
            response = _error(429, f"too many event streams (limit={settings.max_streams})", retry_after=1)
            response.headers["Retry-After"] = "1"
            return response
        streams.active += 1

        def release() -> None:
            streams.active -= 1

        return _CountedStream(content, release)

    async def _event_stream(job_id: str, cursor: int, follow: bool) -> AsyncIterator[str]:
        after = cursor
        while True:
            wake = manager.waiter(job_id)  # registered before reading: no write can slip between
            try:
                rows = journal.read(job_id, after=after, limit=settings.replay_batch)
            except CursorExpired as error:
                yield _sse("gap", {"after": after, "first_retained": error.first_retained})
                after = error.first_retained - 1
                wake.cancel()
                continue
            if rows:
                wake.cancel()
                yield "".join(f"id: {seq}\ndata: {text}\n\n" for seq, text in rows)
                after = rows[-1][0]
                continue
            job = journal.job(job_id)
            if job is not None and job.state in TERMINAL_STATES:
                wake.cancel()
                yield _sse("end", {"state": job.state, "last_seq": job.last_seq})
                return
            if not follow or manager.closing:
                wake.cancel()
                return
            try:
                await asyncio.wait_for(wake, settings.keepalive_seconds)
            except TimeoutError:
                yield ": keepalive\n\n"

    async def logs_stream(request: Request) -> Response:
        from pathlib import Path

        from sparkrun.api.manage import log_start, read_new_lines
        from sparkrun.core.deployments import DeploymentStore

        name = request.query_params.get("name", "")
        tail = request.query_params.get("tail")
        if tail is not None and not (tail.isascii() and tail.isdigit() and len(tail) <= 9):
            raise ValueError(f"tail must be a non-negative integer (tail={tail[:20]!r})")
        follow = _flag(request, "follow", True)
        deployment = DeploymentStore(manager.state_dir).load(name)
        if deployment is None:
            return _error(404, f"no deployment with this name (deployment={name[:80]!r})")
        path = Path(deployment.log_path)

        async def stream() -> AsyncIterator[str]:
            lines, position = log_start(path, int(tail) if tail else None)
            idle = 0.0
            while True:
                ended = follow and not deployment.alive()
                if lines:
                    yield "".join(f"data: {json.dumps(line)}\n\n" for line in lines)
                new, position, had_data = read_new_lines(path, position)
                if new:
                    lines, idle = new, 0.0
                    continue
                lines = []
                if not follow or (ended and not had_data) or manager.closing:
                    yield _sse("end", {"deployment": name})
                    return
                await asyncio.sleep(0.2)
                idle += 0.2
                if idle >= settings.keepalive_seconds:
                    idle = 0.0
                    yield ": keepalive\n\n"

        return counted_stream(stream())

    async def prometheus(request: Request) -> Response:
        if metrics is None:
            return _error(404, "metrics are disabled for this daemon (--no-metrics)")
        return Response(metrics(), media_type="text/plain; version=0.0.4; charset=utf-8")

    routes = [
        Route("/v1/health", health),
        Route("/metrics", prometheus),
        Route("/v1/jobs", guarded(submit), methods=["POST"]),
        Route("/v1/jobs", guarded(list_jobs), methods=["GET"]),
        Route("/v1/jobs/{job_id}", guarded(show_job)),
        Route("/v1/jobs/{job_id}/cancel", guarded(cancel), methods=["POST"]),
        Route("/v1/jobs/{job_id}/events", guarded(events)),
        Route("/v1/jobs/{job_id}/prompts", guarded(prompts)),
        Route("/v1/jobs/{job_id}/prompts/{prompt_id}", guarded(answer), methods=["POST"]),
        Route("/v1/streams/logs", guarded(logs_stream)),
    ]
    return _BearerAuth(Starlette(routes=routes), settings.token)


class _CountedStream(StreamingResponse):
    """A Server-Sent Events response that gives its subscriber slot back however it ends."""

    def __init__(self, content: AsyncIterator[str], release: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream", headers=_SSE_HEADERS)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"the body holds {name}; JSON numbers must be finite")


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"
