"""What sparkrun runs on a remote host: sent over SSH with every call, never installed.

The bootstrap of :mod:`sparkrun.core.executors.ssh_transport` reads this
module and the standard-library-only core modules it imports from stdin,
then calls :func:`main`, which reads one JSON request line and answers in
JSON lines: ``{"event": ...}`` or ``{"line": ...}`` while it works, then
one ``{"result": ...}`` or ``{"error": ..., "kind": ...}``. stdin stays open
while the caller listens; its end means the caller is gone, and a streaming
action stops. A workload runs detached in its own session, with its record
and log under the remote user's ``$XDG_STATE_HOME/sparkrun/hosted``
(``~/.local/state/sparkrun/hosted``), so it outlives the connection and a
later call finds it. Python 3.8 or newer: annotations are never evaluated, and the
rest avoids newer syntax.
"""

from __future__ import annotations

import errno
import json
import os
import select
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from sparkrun.core import log_tail
from sparkrun.core.processes import ProcessIdentity, boot_id, spawn_detached, terminate_group
from sparkrun.core.readiness import NotReady, wait_ready

__all__ = ["AgentError", "Channel", "hosted", "main", "register"]


class AgentError(Exception):
    """A refusal or failure the caller shows as it is; ``kind`` lets it react (e.g. ``port_in_use``)."""

    def __init__(self, message: str, kind: str = "failed") -> None:
        super().__init__(message)
        self.kind = kind


class _CallerGone(Exception):
    pass


class Channel:
    """Answers go to stdout as JSON lines; the end of stdin says the caller stopped listening."""

    def __init__(self, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self._stdin, self._stdout = stdin, stdout

    def send(self, **message: Any) -> None:
        self._stdout.write(json.dumps(message).encode() + b"\n")
        self._stdout.flush()

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes of the data that follows the request (for actions that receive data)."""
        return self._stdin.read(size)

    def read_line(self, limit: int = 65536) -> bytes:
        return self._stdin.readline(limit)

    def caller_gone(self) -> bool:
        ready, _, _ = select.select([self._stdin.fileno()], [], [], 0)
        return bool(ready) and os.read(self._stdin.fileno(), 4096) == b""


def hosted() -> Path:
    """This host's sparkrun folder (``SPARKRUN_HOSTED_DIR`` when sparkrun runs the agent on its own machine)."""
    explicit = os.environ.get("SPARKRUN_HOSTED_DIR")
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    directory = Path(explicit) if explicit else Path(base) / "sparkrun" / "hosted"
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


def _file(name: Any, suffix: str) -> Path:
    """A deployment's file; the name was checked by the caller, and its path is checked here again."""
    directory = hosted()
    if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
        raise AgentError(f"deployment name is {name!r}; it cannot be a path", "bad_request")
    path = directory / f"{name}{suffix}"
    if path.resolve().parent != directory.resolve():
        raise AgentError(f"deployment {name!r} resolves outside {directory}", "bad_request")
    return path


def _identity(data: Any) -> ProcessIdentity:
    identity = ProcessIdentity.from_json(data)
    if identity is None:
        raise AgentError(f"a process identity is unreadable ({data!r:.200})", "bad_request")
    return identity


def _check_port(address: str, port: int) -> None:
    import socket  # imports only where needed: every import costs each call on the host

    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise AgentError(f"port is already in use (port={port}, address={address})", "port_in_use") from None
            reason = f"port cannot be used (port={port}, address={address}, {error.strerror})"
            raise AgentError(reason, "port") from None


def _probe(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    import platform

    if request.get("port"):
        _check_port(request["address"], int(request["port"]))
    return {"python": platform.python_version(), "boot_id": boot_id(), "hosted": str(hosted())}


def _launch(request: dict[str, Any], channel: Channel) -> dict[str, Any]:
    """Start the workload detached, report its identity, then wait until it is ready (or say why not)."""
    import shutil

    argv: list[str] = request["argv"]
    if shutil.which(argv[0]) is None:
        raise AgentError(f"command not found on this host (command={argv[0]!r})", "command_not_found")
    address, port = request["address"], int(request["port"])
    _check_port(address, port)
    log_path, record = _file(request["name"], ".log"), _file(request["name"], ".json")
    popen, identity = spawn_detached(argv, env=request["env"], cwd=os.path.expanduser("~"), log_path=log_path)
    temporary = record.with_suffix(".json.tmp")
    temporary.write_text(json.dumps({"identity": identity.to_json(), "argv": argv, "started_at": time.time()}))
    temporary.replace(record)
    channel.send(event="started", identity=identity.to_json(), log_path=str(log_path))

    last_tick = [time.monotonic()]

    def exited() -> str | None:
        if time.monotonic() - last_tick[0] >= 1.0:  # a sign of life the caller can interrupt between
            channel.send(event="waiting")
            last_tick[0] = time.monotonic()
        code = popen.poll()
        if code is not None:
            tail = "\n".join(log_tail.tail(log_path, 10)[0]) or "(the log is empty)"
            return f"workload exited during startup with code {code} (pid={popen.pid}); last log lines:\n{tail}"
        if channel.caller_gone():
            raise _CallerGone
        return None

    try:
        wait_ready(
            address=address,
            port=port,
            http_path=request.get("http_path"),
            timeout=float(request["timeout"]),
            exited=exited,
            on_step=lambda index, total, label: channel.send(event="step", index=index, total=total, label=label),
        )
    except NotReady as error:
        raise AgentError(str(error), "not_ready") from None
    return {"ready": True}


def _alive(request: dict[str, Any], channel: Channel) -> list[bool]:
    return [_identity(data).matches() for data in request["identities"]]


def _stop(request: dict[str, Any], channel: Channel) -> str:
    outcome = terminate_group(_identity(request["identity"]), grace=float(request["grace"]))
    if outcome is None:
        raise AgentError("cannot signal the workload: it no longer leads its own process group", "not_leader")
    _file(request["name"], ".json").unlink(missing_ok=True)
    return outcome


def _logs(request: dict[str, Any], channel: Channel) -> None:
    path = _file(request["name"], ".log")
    if not path.is_file():
        raise AgentError(f"this host has no log of the deployment (path={path})", "no_log")
    identity = ProcessIdentity.from_json(request.get("identity"))

    def alive() -> bool:
        if channel.caller_gone():
            raise _CallerGone
        return identity is not None and identity.matches()

    for line in log_tail.follow(path, alive, request.get("tail"), bool(request.get("follow"))):
        channel.send(line=line)


Action = Callable[[dict[str, Any], Channel], Any]
_ACTIONS: dict[str, Action] = {
    "probe": _probe,
    "launch": _launch,
    "alive": _alive,
    "stop": _stop,
    "logs": _logs,
}


def register(name: str, action: Action) -> None:
    """Add an action; extension modules sent after this one (a plugin's receiver) call it when loaded."""
    _ACTIONS[name] = action


def main(stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """Serve one request read from ``stdin``."""
    channel = Channel(stdin, stdout)
    try:
        request = json.loads(stdin.readline())
        action = _ACTIONS.get(str(request.get("action"))) if isinstance(request, dict) else None
        if action is None:
            raise AgentError(f"unknown request ({str(request)[:200]})", "bad_request")
        channel.send(result=action(request, channel))
    except AgentError as error:
        channel.send(error=str(error), kind=error.kind)
    except _CallerGone:
        pass
    except (KeyError, TypeError, ValueError) as error:
        channel.send(error=f"malformed request: {type(error).__name__}: {error}", kind="bad_request")
    except OSError as error:
        channel.send(error=f"{error.strerror or error} ({getattr(error, 'filename', None) or 'no file'})", kind="os")
