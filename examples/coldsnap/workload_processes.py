"""The workload's server processes: starting, probing, asking, stopping, and remembering them.

Every server runs detached in its own session, its output in a log under the state directory.
Its pid is recorded together with the kernel's start time of that pid, so a later controller run
never signals a process that merely reuses the number. Linux only (``/proc``), like the loopback
aliases 127.0.0.2 and up that the example's two "hosts" rely on.
"""

from __future__ import annotations

import contextlib
import fcntl
import http.client
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire import ID_PATTERN, rfc3339_ns, write_private_atomically

__all__ = [
    "RunningUnit",
    "StateDir",
    "UnitError",
    "chat",
    "http_ok",
    "port_free",
    "port_open",
    "process_start_time",
    "spawn",
    "stop",
    "stream_chat",
]


class UnitError(RuntimeError):
    """A unit could not be started, did not become ready, or answered wrongly."""


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces and parentheses
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


@dataclass
class RunningUnit:
    """A started server. ``popen`` is set only in the controller run that started it."""

    unit: str
    worker: str
    host: str
    port: int
    pid: int | None
    start_time: int | None
    command: list[str]
    log: str
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        if self.pid is None or self.start_time is None:
            return False
        return process_start_time(self.pid) == self.start_time

    def exit_code(self) -> int | None:
        return self.popen.poll() if self.popen is not None else None

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = Path(self.log).read_text(errors="replace")
        except OSError:
            return ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def as_record(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "worker": self.worker,
            "host": self.host,
            "port": self.port,
            "pid": self.pid,
            "start_time": self.start_time,
            "command": self.command,
            "log": self.log,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RunningUnit:
        pid, start_time = record.get("pid"), record.get("start_time")
        unit, worker = str(record.get("unit", "")), str(record.get("worker", ""))
        return cls(
            unit=unit if ID_PATTERN.fullmatch(unit) else "unknown-unit",
            worker=worker if ID_PATTERN.fullmatch(worker) else "unknown-worker",
            host=str(record.get("host", "")),
            port=int(record.get("port", 0)),
            pid=pid if type(pid) is int and pid > 0 else None,
            start_time=start_time if type(start_time) is int else None,
            command=[str(arg) for arg in record.get("command", [])],
            log=str(record.get("log", "")),
        )


def spawn(
    unit: str, worker: str, host: str, port: int, command: list[str], environment: dict[str, str], log: Path
) -> RunningUnit:
    """Start one server detached (own session, stdin closed, output appended to ``log``)."""
    log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(log, "ab") as output:
        output.write(f"--- {rfc3339_ns()} coldsnap-example starts {unit}: {' '.join(command)}\n".encode())
        output.flush()
        try:
            popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, **environment},
                start_new_session=True,
            )
        except OSError as exc:
            raise UnitError(f"cannot start {unit}: {exc}") from None
    started = RunningUnit(unit, worker, host, port, popen.pid, process_start_time(popen.pid), command, str(log))
    started.popen = popen
    return started


def stop(unit: RunningUnit, grace: float) -> str:
    """SIGTERM the unit's process group, SIGKILL after ``grace`` seconds; say what it took."""
    if not unit.alive():
        if unit.popen is not None:
            unit.popen.wait()
        return "not-running"
    assert unit.pid is not None
    try:
        own_group = os.getpgid(unit.pid) == unit.pid
    except ProcessLookupError:
        return "not-running"

    def send(signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            if own_group:
                os.killpg(unit.pid, signum)  # type: ignore[arg-type]
            else:
                os.kill(unit.pid, signum)  # type: ignore[arg-type]

    send(signal.SIGTERM)
    if _wait_gone(unit, grace):
        return "terminated"
    send(signal.SIGKILL)
    return "killed" if _wait_gone(unit, 10.0) else "still-running"


def _wait_gone(unit: RunningUnit, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while unit.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    if unit.popen is not None:
        unit.popen.wait()
    return True


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def port_open(host: str, port: int) -> bool:
    """Something accepts connections on the port."""
    with socket.socket(_family(host)) as sock:
        sock.settimeout(0.25)
        return sock.connect_ex((host, port)) == 0


def port_free(host: str, port: int) -> bool:
    """A server could bind the port now (with SO_REUSEADDR, as Python's HTTP servers do)."""
    with socket.socket(_family(host)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def http_ok(host: str, port: int, path: str, timeout: float = 2.0) -> bool:
    """GET ``path`` answers 2xx."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return 200 <= response.status < 300
    except (OSError, http.client.HTTPException):
        return False
    finally:
        connection.close()


def _chat_body(model: str, prompt: str, stream: bool) -> bytes:
    return json.dumps(
        {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 32, "stream": stream}
    ).encode()


def chat(host: str, port: int, model: str, prompt: str, timeout: float = 30.0) -> str:
    """One chat completion; the reply's text."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"}
        connection.request("POST", "/v1/chat/completions", _chat_body(model, prompt, False), headers)
        response = connection.getresponse()
        body = response.read()
        if response.status != 200:
            raise UnitError(f"chat completion on {host}:{port} answered {response.status}: {body[:200]!r}")
        content = json.loads(body)["choices"][0]["message"]["content"]
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError, TypeError) as exc:
        raise UnitError(f"chat completion on {host}:{port} failed: {exc}") from None
    finally:
        connection.close()
    if not isinstance(content, str) or not content:
        raise UnitError(f"chat completion on {host}:{port} returned no text")
    return content


def stream_chat(
    host: str, port: int, model: str, prompt: str, on_first_content: Callable[[], None], timeout: float = 30.0
) -> str:
    """A streamed chat completion; ``on_first_content`` runs the moment the first text chunk arrives."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    parts: list[str] = []
    try:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        connection.request("POST", "/v1/chat/completions", _chat_body(model, prompt, True), headers)
        response = connection.getresponse()
        if response.status != 200:
            raise UnitError(f"streamed chat on {host}:{port} answered {response.status}: {response.read(200)!r}")
        for raw_line in _lines(response):
            if not raw_line.startswith(b"data:"):
                continue
            data = raw_line[5:].strip()
            if data == b"[DONE]":
                break
            choices = json.loads(data).get("choices") or [{}]
            content = (choices[0].get("delta") or {}).get("content")
            if isinstance(content, str) and content:
                if not parts:
                    on_first_content()
                parts.append(content)
    except (OSError, http.client.HTTPException, ValueError, AttributeError) as exc:
        raise UnitError(f"streamed chat on {host}:{port} failed: {exc}") from None
    finally:
        connection.close()
    if not parts:
        raise UnitError(f"streamed chat on {host}:{port} returned no text")
    return "".join(parts)


def _lines(response: http.client.HTTPResponse) -> Iterator[bytes]:
    while line := response.readline(65536):
        yield line.strip()


class StateDir:
    """The controller's own state: one record per workload (what runs, from which artifact), logs, staged capsules."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _workloads(self) -> Path:
        path = self.root / "workloads"
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        return path

    def log_path(self, workload: str, unit: str) -> Path:
        return self._workloads() / workload / f"{unit}.log"

    def staged_dir(self, workload: str, manifest_sha256: str) -> Path:
        return self.root / "staged" / workload / manifest_sha256.removeprefix("sha256:")[:16]

    def _record(self, workload: str, role: str) -> Path:
        """``role`` is ``workload`` (what restore and wake leave running) or ``capture`` (servers of a capture)."""
        name = workload if role == "workload" else f"{workload}+{role}"  # "+" is never part of a name
        return self._workloads() / f"{name}.json"

    def read(self, workload: str, role: str = "workload") -> dict[str, Any] | None:
        """The workload's record, or None if the controller never ran it."""
        path = self._record(workload, role)
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise UnitError(f"the state record {path} cannot be read ({exc}); remove it to start afresh") from None
        if not isinstance(record, dict) or not isinstance(record.get("units", []), list):
            raise UnitError(f"the state record {path} is not a workload record; remove it to start afresh")
        return record

    def units(self, record: dict[str, Any] | None) -> list[RunningUnit]:
        return [RunningUnit.from_record(unit) for unit in (record or {}).get("units", []) if isinstance(unit, dict)]

    def write(
        self,
        workload: str,
        state: str,
        operation_id: str,
        units: list[RunningUnit],
        artifact: dict[str, str] | None,
        role: str = "workload",
    ) -> None:
        record = {
            "format": 1,
            "workload": workload,
            "state": state,
            "operation_id": operation_id,
            "artifact": artifact,
            "units": [unit.as_record() for unit in units],
            "updated_at": rfc3339_ns(),
        }
        data = (json.dumps(record, indent=2, sort_keys=True) + "\n").encode()
        write_private_atomically(self._record(workload, role), data)

    def remove(self, workload: str, role: str) -> None:
        self._record(workload, role).unlink(missing_ok=True)

    def recorded_units(self, workload: str) -> list[RunningUnit]:
        """Every server the controller recorded for the workload, restored or capturing."""
        return [*self.units(self.read(workload)), *self.units(self.read(workload, "capture"))]

    @contextlib.contextmanager
    def lock(self, workload: str, timeout: float, cancelled: Callable[[], bool]) -> Iterator[None]:
        """One mutating operation per workload at a time; waits up to ``timeout`` seconds."""
        path = self._workloads() / f"{workload}.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline or cancelled():
                        raise UnitError(
                            f"another controller operation on workload {workload} holds {path} (waited {timeout:g} s)"
                        ) from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)
