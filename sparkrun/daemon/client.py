"""A small synchronous client of the daemon's HTTP API (httpx)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sparkrun.core.events import Event
from sparkrun.daemon.files import DaemonPaths, lock_held, read_info, read_token
from sparkrun.errors import DaemonError

__all__ = ["DaemonClient", "StreamEvent", "StreamExpired", "parse_sse"]


class StreamExpired(DaemonError):
    """The cursor is older than what the journal retains."""

    def __init__(self, message: str, first_retained: int) -> None:
        super().__init__(message)
        self.first_retained = first_retained


@dataclass(frozen=True)
class StreamEvent:
    """One Server-Sent Event: ``name`` is ``message`` for journal events, else ``gap`` or ``end``.

    ``data`` is the decoded JSON as the daemon sent it: a journal event (see :meth:`journal_event`),
    a ``gap`` or ``end`` object, or a log line (a string) on a log stream.
    """

    name: str
    data: Any
    seq: int | None

    def journal_event(self) -> Event:
        """This ``message`` of a job's event stream as a native event.

        The stream is a process boundary, and this is where its events become typed. Checked: ``data``
        is a JSON object with a string ``operation_id``, as the daemon's journal only holds such; the
        rest is taken as the job's operation delivered it (an unknown ``type`` passes too). Anything
        else raises :class:`~sparkrun.errors.DaemonError`.
        """
        data = self.data
        if not isinstance(data, dict) or not isinstance(data.get("operation_id"), str):
            raise DaemonError(f"the daemon sent a stream message that is not an event (seq={self.seq})")
        return cast(Event, data)


def parse_sse(lines: Iterator[str]) -> Iterator[StreamEvent]:
    """The events of a Server-Sent Events body, given line by line; comments (keepalives) are skipped."""
    name, data, seq = "message", [], None
    for line in lines:
        if line.startswith(":"):
            continue
        if line:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                seq = int(value)
            continue
        if data:
            yield StreamEvent(name, json.loads("\n".join(data)), seq)
        name, data, seq = "message", [], None


class DaemonClient:
    def __init__(self, url: str, token: str, *, timeout: float = 30.0) -> None:
        import httpx

        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=timeout)

    @classmethod
    def for_state(cls, state_dir: Path) -> DaemonClient:
        """The client of the daemon running for ``state_dir``."""
        paths = DaemonPaths(state_dir)
        info = read_info(paths)
        if info is None or not lock_held(paths):
            raise DaemonError(
                f"no daemon runs for this state directory (state_dir={state_dir}); "
                "start one with `sparkrun daemon start`"
            )
        return cls(info.url, read_token(paths))

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise DaemonError(f"the daemon did not answer (url={self.url}, {type(error).__name__}: {error})") from None
        if response.status_code >= 400:
            try:
                message = response.json().get("error", response.text)
            except ValueError:
                message = response.text
            raise DaemonError(f"{message} (status={response.status_code})")
        body = response.json()
        if not isinstance(body, dict):  # every answer of the API is a JSON object
            raise DaemonError(f"the daemon answered with something other than a JSON object (url={self.url}{path})")
        return body

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/v1/health")

    def submit(self, operation: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return self._call("POST", "/v1/jobs", json={"operation": operation, "arguments": arguments})

    def jobs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The newest jobs, as listed (without arguments and results: see :meth:`job`)."""
        jobs: list[dict[str, Any]] = self._call("GET", "/v1/jobs", params={"limit": limit})["jobs"]
        return jobs

    def counts(self) -> dict[str, int]:
        """How many jobs the journal holds in each state."""
        counts: dict[str, int] = self._call("GET", "/v1/jobs", params={"limit": 1})["counts"]
        return counts

    def job(self, job_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/jobs/{job_id}")

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._call("POST", f"/v1/jobs/{job_id}/cancel")

    def prompts(self, job_id: str) -> list[dict[str, Any]]:
        prompts: list[dict[str, Any]] = self._call("GET", f"/v1/jobs/{job_id}/prompts")["prompts"]
        return prompts

    def answer(self, job_id: str, prompt_id: str, value: Any) -> None:
        self._call("POST", f"/v1/jobs/{job_id}/prompts/{prompt_id}", json={"answer": value})

    def events(self, job_id: str, *, after: int | None = None, follow: bool = True) -> Iterator[StreamEvent]:
        """The job's event stream after ``after``; ends after the ``end`` event (or at once without follow).

        ``after=None`` means "from the oldest retained event": if older ones were trimmed, a ``gap`` event
        comes first. An explicit cursor older than what the journal retains raises :class:`StreamExpired`.
        """
        params = {"follow": "true" if follow else "false"}
        if after is not None:
            params["after"] = str(after)
        with self._http.stream("GET", f"/v1/jobs/{job_id}/events", params=params, timeout=None) as response:
            if response.status_code >= 400:
                response.read()
                body = response.json()
                if "first_retained" in body:
                    raise StreamExpired(
                        f"{body.get('error')} (status={response.status_code}, first_retained={body['first_retained']})",
                        body["first_retained"],
                    )
                raise DaemonError(f"{body.get('error')} (status={response.status_code})")
            for event in parse_sse(response.iter_lines()):
                yield event
                if event.name == "end":
                    return
