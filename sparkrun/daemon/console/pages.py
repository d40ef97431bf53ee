"""The console's pages and form actions (``/ui/…``); JSON and streams stay on the ``/v1/`` API."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Route

from sparkrun.daemon.console.job_view import activities, activity_row, event_line
from sparkrun.daemon.console.markup import HEADERS, csrf_field, e, page, table
from sparkrun.daemon.console.sessions import COOKIE, Session, Sessions
from sparkrun.daemon.console.trace_view import trace_body
from sparkrun.daemon.jobs import JobManager
from sparkrun.daemon.journal import CursorExpired, JobRecord

__all__ = ["ROUTES"]

_STATIC = Path(__file__).parent / "static"
_STATIC_FILES = {"console.js": "text/javascript", "console.css": "text/css", "favicon.svg": "image/svg+xml"}
_STATES = ("queued", "running", "waiting_input", "succeeded", "failed", "cancelled", "lost")
_MAX_FORM_BYTES = 16 * 1024
_SHOWN_EVENTS = 500


class _SignIn(Exception):
    """No valid session: the page answers with the sign-in page instead."""


class _NoJob(LookupError):
    """A job id the journal does not know: a 404 page."""


def _sessions(request: Request) -> Sessions:
    sessions: Sessions = request.app.state.sessions
    return sessions


def _manager(request: Request) -> JobManager:
    manager: JobManager = request.app.state.manager
    return manager


def _session(request: Request) -> Session:
    session = _sessions(request).get(request.cookies.get(COOKIE))
    if session is None:
        raise _SignIn
    return session


async def _form(request: Request) -> dict[str, str]:
    """A url-encoded form body, bounded; one value per field."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > _MAX_FORM_BYTES:
            raise ValueError(f"the form is larger than {_MAX_FORM_BYTES} bytes")
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {key: values[-1] for key, values in fields.items()}


async def _checked_form(request: Request) -> tuple[Session, dict[str, str]]:
    session = _session(request)
    form = await _form(request)
    if not session.csrf_ok(form.get("csrf")):
        raise PermissionError("the form's CSRF token is missing or wrong; reload the page")
    return session, form


def _redirect(location: str) -> Response:
    return RedirectResponse(location, status_code=303, headers=HEADERS)


def _age(since: float | None) -> str:
    if since is None:
        return ""
    seconds = max(0.0, time.time() - since)
    return (
        f"{seconds:.0f} s"
        if seconds < 120
        else f"{seconds / 60:.0f} min"
        if seconds < 7200
        else f"{seconds / 3600:.1f} h"
    )


def _duration(job: JobRecord) -> str:
    if job.started_at is None:
        return ""
    end = job.finished_at or time.time()
    return f"{end - job.started_at:.1f} s"


def _last_message(manager: JobManager, job: JobRecord) -> str:
    if job.last_seq < 1:
        return ""
    try:
        rows = manager.journal.read(job.job_id, after=job.last_seq - 1, limit=1)
    except CursorExpired:
        return ""
    from json import loads

    return str(loads(rows[0][1]).get("message", "")) if rows else ""


async def _job(request: Request) -> tuple[Session, JobManager, JobRecord]:
    """The signed-in session, the manager and the job the path names (a 404 page if none)."""
    session, manager = _session(request), _manager(request)
    job = await manager.read(manager.journal.job, request.path_params["job_id"])
    if job is None:
        raise _NoJob(request.path_params["job_id"])
    return session, manager, job


async def sign_in_page(request: Request) -> Response:
    if request.method == "POST":
        form = await _form(request)
        session = _sessions(request).sign_in(form.get("token", ""))
        if session is None:
            return _sign_in_form("That is not this daemon's token.", status=403)
        response = _redirect("/ui/")
        response.set_cookie(COOKIE, session.id, httponly=True, samesite="strict", path="/", max_age=12 * 3600)
        return response
    return _sign_in_form()


def _sign_in_form(problem: str = "", status: int = 200) -> Response:
    alert = f'<p class="error" role="alert"><strong>ERROR</strong> {e(problem)}</p>' if problem else ""
    body = (
        f"{alert}<p>Paste the daemon's token: the file <code>daemon/token</code> in its state directory "
        "(<code>cat ~/.local/state/sparkrun/daemon/token</code> by default). "
        "It is exchanged for a session cookie and never kept in the page.</p>"
        '<form method="post" action="/ui/sign-in"><label for="token">Token</label> '
        '<input id="token" name="token" type="password" autocomplete="off" required autofocus> '
        '<button type="submit">Sign in</button></form>'
    )
    return page("Sign in", body, status=status)


async def sign_out(request: Request) -> Response:
    session, _ = await _checked_form(request)
    _sessions(request).sign_out(session.id)
    response = _redirect("/ui/sign-in")
    response.delete_cookie(COOKIE, path="/")
    return response


async def jobs_page(request: Request) -> Response:
    session = _session(request)
    manager = _manager(request)
    wanted = request.query_params.get("state")
    states = [wanted] if wanted in _STATES else None
    jobs = await manager.read(manager.journal.jobs, limit=100, states=states)
    rows = []
    for job in jobs:
        last = await manager.read(_last_message, manager, job)
        rows.append(
            f'<tr data-job="{e(job.job_id)}"><td><a href="/ui/jobs/{e(job.job_id)}">{e(job.job_id)}</a></td>'
            f'<td class="state-{e(job.state)}">{e(job.state)}</td><td>{e(job.operation)}</td>'
            f"<td>{e(_age(job.created_at))}</td><td>{e(_duration(job))}</td><td>{e(last)}</td></tr>"
        )
    filters = " ".join(
        f'<a href="/ui/?state={s}"{" aria-current=page" if s == wanted else ""}>{s}</a>' for s in _STATES
    )
    body = (
        f'<p class="filters">Filter: <a href="/ui/">all</a> {filters}</p>'
        + table(["job", "state", "operation", "age", "duration", "last message"], rows, body_id="jobs")
        + ("" if rows else '<p id="no-jobs">No jobs yet.</p>')
    )
    return page("Jobs", body, csrf=session.csrf, data={"page": "jobs", "state": wanted or ""})


async def job_page(request: Request) -> Response:
    session, manager, job = await _job(request)
    job_id = job.job_id
    try:
        rows = await manager.read(
            manager.journal.read, job_id, after=max(0, job.last_seq - _SHOWN_EVENTS), limit=_SHOWN_EVENTS
        )
    except CursorExpired as error:
        rows = await manager.read(manager.journal.read, job_id, after=error.first_retained - 1, limit=_SHOWN_EVENTS)
    cursor = rows[-1][0] if rows else 0
    body = (
        f"<p>Operation <code>{e(job.operation)}</code>, operation id <code>{e(job.operation_id)}</code>, "
        f'state <strong id="state">{e(job.state)}</strong>. <a href="/ui/jobs/{e(job_id)}/trace">Trace</a></p>'
        + _outcome(job)
        + _prompts(manager.prompts(job_id), job_id, session.csrf)
        + _cancel(job, session.csrf)
        + "<h2>Activities</h2>"
        + table(
            ["source", "host", "stage", "status", "progress", "last message"],
            [activity_row(a) for a in activities(rows).values()],
            body_id="activities",
        )
        + '<h2>Events</h2><p id="stream-state" aria-live="polite"></p>'
        + f'<ol id="events" class="events">{"".join(event_line(seq, text) for seq, text in rows)}</ol>'
    )
    data = {"page": "job", "job": job_id, "cursor": str(cursor), "state": job.state}
    return page(f"Job {job_id}", body, csrf=session.csrf, data=data)


def _outcome(job: JobRecord) -> str:
    if job.state == "succeeded":
        from json import dumps

        return f'<section id="outcome"><h2>Result</h2><pre>{e(dumps(job.result, indent=2)[:20000])}</pre></section>'
    if job.error:
        return (
            '<section id="outcome" class="error"><h2>Error</h2>'
            f"<p><strong>ERROR</strong> {e(job.error.get('type'))}: {e(job.error.get('message'))}</p></section>"
        )
    return '<section id="outcome" hidden></section>'


def _prompts(prompts: list[dict[str, Any]], job_id: str, csrf: str) -> str:
    forms = []
    for prompt in prompts:
        action = f"/ui/jobs/{e(job_id)}/prompts/{e(prompt['prompt_id'])}"
        question = f'<p class="question">{e(prompt["question"])}</p>'
        if prompt["kind"] == "confirm":
            field = (
                '<button type="submit" name="answer" value="yes">Yes</button> '
                '<button type="submit" name="answer" value="no">No</button>'
            )
        elif prompt["kind"] == "choice":
            options = "".join(f'<option value="{e(c)}">{e(c)}</option>' for c in prompt.get("choices") or [])
            field = (
                f'<select name="answer" aria-label="answer">{options}</select> <button type="submit">Answer</button>'
            )
        else:
            field = (
                '<input type="password" name="answer" autocomplete="off" aria-label="secret answer" required> '
                '<button type="submit">Send</button>'
            )
        forms.append(f'<form method="post" action="{action}" class="prompt">{csrf_field(csrf)}{question}{field}</form>')
    return f'<section id="prompts"><h2>Waiting for you</h2>{"".join(forms)}</section>' if forms else ""


def _cancel(job: JobRecord, csrf: str) -> str:
    if job.state in ("succeeded", "failed", "cancelled", "lost"):
        return ""
    return (
        f'<form method="post" action="/ui/jobs/{e(job.job_id)}/cancel" id="cancel">{csrf_field(csrf)}'
        '<button type="submit">Cancel job</button></form>'
    )


async def cancel_job(request: Request) -> Response:
    await _checked_form(request)
    job_id = request.path_params["job_id"]
    await _manager(request).cancel(job_id)
    return _redirect(f"/ui/jobs/{job_id}")


async def answer_prompt(request: Request) -> Response:
    _, form = await _checked_form(request)
    job_id, prompt_id = request.path_params["job_id"], request.path_params["prompt_id"]
    manager = _manager(request)
    kind = next((p["kind"] for p in manager.prompts(job_id) if p["prompt_id"] == prompt_id), None)
    raw = form.get("answer", "")
    value: Any = raw in ("yes", "true") if kind == "confirm" else raw
    await manager.answer(job_id, prompt_id, value)
    return _redirect(f"/ui/jobs/{job_id}")


async def trace_page(request: Request) -> Response:
    session, manager, job = await _job(request)
    job_id = job.job_id
    links = request.app.state.settings.trace_links
    body = await manager.read(trace_body, manager.state_dir, job.operation_id, links)
    return page(
        f"Trace of job {job_id}", f'<p><a href="/ui/jobs/{e(job_id)}">Back to the job</a></p>{body}', csrf=session.csrf
    )


async def deployments_page(request: Request) -> Response:
    session = _session(request)
    manager = _manager(request)
    from sparkrun.core.deployments import DeploymentStore

    deployments = await manager.read(DeploymentStore(manager.state_dir).all)
    rows, logs = [], []
    for deployment in deployments:
        for placement in deployment.placements:
            rows.append(
                f"<tr><td>{e(deployment.name)}</td><td>{e(placement.host)}</td><td>{e(placement.pid)}</td>"
                f'<td><a href="{e(placement.url)}">{e(placement.url)}</a></td><td>{e(deployment.recipe)}</td></tr>'
            )
        logs.append(
            f'<section class="log"><h2>Log of {e(deployment.name)}</h2>'
            f'<pre class="log-lines" data-deployment="{e(deployment.name)}" aria-live="polite"></pre></section>'
        )
    body = table(["name", "host", "pid", "url", "recipe"], rows) + ("" if rows else "<p>Nothing is deployed.</p>")
    return page("Deployments", body + "".join(logs), csrf=session.csrf, data={"page": "deployments"})


async def static_file(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _STATIC_FILES:
        return Response("not found", status_code=404)
    return FileResponse(_STATIC / name, media_type=_STATIC_FILES[name], headers={"X-Content-Type-Options": "nosniff"})


def _guarded(handler: Any) -> Any:
    """Unsigned-in visitors go to the sign-in page; a bad form is a 403 or 400 page, never a traceback."""

    async def guarded(request: Request) -> Response:
        try:
            response: Response = await handler(request)
            return response
        except _SignIn:
            return _redirect("/ui/sign-in")
        except _NoJob as error:
            return page("No such job", f"<p>There is no job {e(error)}.</p>", status=404)
        except PermissionError as error:
            return page("Forbidden", f'<p class="error"><strong>ERROR</strong> {e(error)}</p>', status=403)
        except (ValueError, LookupError) as error:
            return page("Cannot do that", f'<p class="error"><strong>ERROR</strong> {e(error)}</p>', status=400)

    return guarded


ROUTES = [
    Route("/ui", lambda request: _redirect("/ui/")),
    Route("/ui/", _guarded(jobs_page)),
    Route("/ui/sign-in", _guarded(sign_in_page), methods=["GET", "POST"]),
    Route("/ui/sign-out", _guarded(sign_out), methods=["POST"]),
    Route("/ui/jobs/{job_id}", _guarded(job_page)),
    Route("/ui/jobs/{job_id}/trace", _guarded(trace_page)),
    Route("/ui/jobs/{job_id}/cancel", _guarded(cancel_job), methods=["POST"]),
    Route("/ui/jobs/{job_id}/prompts/{prompt_id}", _guarded(answer_prompt), methods=["POST"]),
    Route("/ui/deployments", _guarded(deployments_page)),
    Route("/ui/static/{name}", static_file),
]
