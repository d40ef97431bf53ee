"""Calls to the remote agent: its code and one request go in on stdin, JSON lines come back.

:class:`AgentTransport` does everything but start the agent's process:
``SshTransport`` starts it on a host through OpenSSH, :class:`LocalTransport`
on this machine (so a copy to ``localhost`` runs the very code a remote
host runs). A request may bring extension modules (a plugin's receiver
actions); they are sent after the agent, which they register with.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import select
import shlex
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from sparkrun.errors import HostError

__all__ = ["REMOTE_COMMAND", "AgentTransport", "LocalTransport", "payload"]

AGENT_MODULE = "sparkrun.core.executors.remote_agent"
_AGENT_MODULES = (
    "sparkrun.core.processes",
    "sparkrun.core.log_tail",
    "sparkrun.core.readiness",
    "sparkrun.core.digests",
    AGENT_MODULE,
)
# Registers the modules sent on stdin under their own names, then lets the agent serve the request after them.
_BOOTSTRAP = f"""\
import json, sys, types
stdin = sys.stdin.buffer
for name, source in json.loads(stdin.read(int(stdin.readline()))):
    parts = name.split(".")
    for depth in range(1, len(parts) + 1):
        prefix = ".".join(parts[:depth])
        if prefix not in sys.modules:
            sys.modules[prefix] = types.ModuleType(prefix)
            if depth > 1:
                setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], sys.modules[prefix])
    exec(compile(source, name.replace(".", "/") + ".py", "exec"), sys.modules[name].__dict__)
sys.modules["{AGENT_MODULE}"].main(stdin, sys.stdout.buffer)
"""
NO_PYTHON = "sparkrun: python3 is not installed on this host"
REMOTE_COMMAND = (
    f"command -v python3 >/dev/null 2>&1 || {{ echo '{NO_PYTHON}' >&2; exit 127; }}; "
    f"exec python3 -I -S -c {shlex.quote(_BOOTSTRAP)}"  # isolated, no site: the standard library is all it uses
)


@functools.cache
def payload(extensions: tuple[str, ...] = ()) -> bytes:
    """The agent's modules (then ``extensions``), framed for the bootstrap."""
    modules = []
    for name in (*_AGENT_MODULES, *extensions):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"cannot find the source of {name}")
        modules.append([name, Path(spec.origin).read_text(encoding="utf-8")])
    data = json.dumps(modules).encode()
    return f"{len(data)}\n".encode() + data


def _opening(request: Mapping[str, Any], extensions: tuple[str, ...]) -> bytes:
    return payload(extensions) + json.dumps(request).encode() + b"\n"


class AgentTransport:
    """Agent calls over whatever process :meth:`argv` starts; subclasses say how and explain failures."""

    host: str

    def argv(self) -> list[str]:
        raise NotImplementedError

    def environment(self) -> dict[str, str] | None:
        return None

    def ensure_ready(self) -> None:
        """Whatever must exist before a call (an SSH master connection)."""

    def failure(self, stderr: str, code: int) -> HostError:
        """What the agent's process dying without an answer means."""
        last = (stderr.strip().splitlines() or [f"exit code {code}"])[-1]
        return HostError(f"{self.host}: the agent ended without an answer: {last}", host=self.host, kind="agent")

    def _popen(self) -> subprocess.Popen[bytes]:
        self.ensure_ready()
        return subprocess.Popen(
            self.argv(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=self.environment(),
        )

    def call(self, request: dict[str, Any], *, timeout: float = 60.0, extensions: tuple[str, ...] = ()) -> Any:
        """Run one request and return its result; any failure is a :class:`HostError` naming the host."""
        self.ensure_ready()
        try:
            done = subprocess.run(
                self.argv(),
                input=_opening(request, extensions),
                capture_output=True,
                timeout=timeout,
                env=self.environment(),
            )
        except subprocess.TimeoutExpired:
            raise HostError(
                f"host {self.host} did not answer within {timeout:g} s (action={request['action']})",
                host=self.host,
                kind="timeout",
            ) from None
        messages = [json.loads(line) for line in done.stdout.splitlines() if line.startswith(b"{")]
        return self._outcome(messages[-1] if messages else {}, done.returncode, done.stderr.decode(errors="replace"))

    def stream(
        self,
        request: dict[str, Any],
        *,
        extensions: tuple[str, ...] = (),
        cancel: threading.Event | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Run one request, yielding its messages as they arrive; the last one is ``{"result": ...}``.

        Closing the generator (or an exception in the caller) closes the
        agent's stdin, which tells it to stop listening. ``cancel``, set from
        another thread, ends the stream within a fraction of a second even
        while the agent is silent (a followed log that writes nothing).
        """
        process = self._popen()
        streams = _pipes(process)
        try:
            streams.stdin.write(_opening(request, extensions))
            streams.stdin.flush()
            last: dict[str, Any] = {}
            for line in _lines(streams.stdout, cancel):
                message = json.loads(line)
                if "result" in message or "error" in message:
                    last = message
                    break
                yield message
            if cancel is not None and cancel.is_set():
                return  # the caller stopped listening: no answer is owed
            streams.stdin.close()
            stderr = streams.stderr.read().decode(errors="replace")
            yield {"result": self._outcome(last, process.wait(timeout=10), stderr)}
        finally:
            _end(process)

    def upload(
        self,
        request: dict[str, Any],
        chunks: Iterable[bytes],
        on_message: Callable[[dict[str, Any]], None],
        *,
        extensions: tuple[str, ...] = (),
    ) -> Any:
        """Run one request whose data follows it on stdin; messages go to ``on_message`` as they come.

        A thread reads the answers while this one writes, so neither side
        can block the other on a full pipe. Returns the result.
        """
        process = self._popen()
        streams = _pipes(process)
        final: dict[str, Any] = {}

        def read() -> None:
            for line in streams.stdout:
                message = json.loads(line)
                if "result" in message or "error" in message:
                    final.update(message)
                    return
                on_message(message)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            failure: Exception | None = None
            try:
                streams.stdin.write(_opening(request, extensions))
                for chunk in chunks:
                    streams.stdin.write(chunk)
            except BrokenPipeError:
                pass  # the agent stopped reading: its answer (or its stderr) says why
            except Exception as error:  # the data could not be produced: cut the stream, let the agent finish
                failure = error
            finally:
                with contextlib.suppress(BrokenPipeError):
                    streams.stdin.close()  # the end of the data: a cut stream shows as one on the other side
            reader.join()
            if failure is not None:
                raise failure  # what the agent kept (whole blobs) stays; its complaint about the cut is moot
            stderr = streams.stderr.read().decode(errors="replace")
            return self._outcome(final, process.wait(timeout=30), stderr)
        finally:
            _end(process)

    def noticed(self, stderr: str) -> None:
        """What the agent's process said on stderr, answer or not (the SSH transport learns from it)."""

    def _outcome(self, final: dict[str, Any], code: int, stderr: str) -> Any:
        self.noticed(stderr)
        if "result" in final:
            return final["result"]
        if "error" in final:
            raise HostError(f"{self.host}: {final['error']}", host=self.host, kind=final.get("kind", ""))
        raise self.failure(stderr, code)


class _Pipes:
    def __init__(self, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr


def _pipes(process: subprocess.Popen[bytes]) -> _Pipes:
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    return _Pipes(process.stdin, process.stdout, process.stderr)


def _lines(stdout: IO[bytes], cancel: threading.Event | None) -> Iterator[bytes]:
    """The agent's lines; with ``cancel``, read so that a silent agent never keeps the reader past it."""
    if cancel is None:
        yield from stdout
        return
    descriptor, pending = stdout.fileno(), b""
    while not cancel.is_set():
        if not select.select([descriptor], [], [], 0.25)[0]:
            continue
        chunk = os.read(descriptor, 65536)
        if not chunk:
            return
        *complete, pending = (pending + chunk).split(b"\n")
        yield from complete


def _end(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=10)
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


class LocalTransport(AgentTransport):
    """The agent on this machine, under ``sh`` as sshd would run it, with its files under ``hosted``."""

    def __init__(self, host: str, hosted: Path) -> None:
        self.host = host
        self._hosted = hosted

    def argv(self) -> list[str]:
        return ["sh", "-c", REMOTE_COMMAND]

    def environment(self) -> dict[str, str]:
        return {**os.environ, "SPARKRUN_HOSTED_DIR": str(self._hosted)}
