"""Arize Phoenix as a real, local OTLP backend, so tests can check what an exporter actually delivered.

Phoenix lives in its own virtual environment (``make phoenix``): it is large and drags in
dependencies the project must not see, so it runs as a subprocess and is read back over its REST API.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import NoReturn, TypeVar

__all__ = ["PhoenixServer"]

_T = TypeVar("_T")

ROOT = Path(__file__).resolve().parents[2]
PYTHON_ENV_VAR = "SPARKRUN_PHOENIX_PYTHON"

# Loopback only, a throwaway database, nothing fetched from the internet, no SQL echo on the log.
_SERVER_ENV = {
    "PHOENIX_HOST": "127.0.0.1",
    "PHOENIX_TELEMETRY_ENABLED": "false",
    # Without this a startup hook downloads a WASM sandbox binary; it also turns telemetry off.
    "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
    # A fresh database otherwise logs ~4,500 lines of migration SQL.
    "PHOENIX_LOG_MIGRATIONS": "false",
    "PYTHONUNBUFFERED": "1",
}

# Talk to loopback directly, whatever proxy the environment configures.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _phoenix_python() -> Path:
    """The interpreter of the venv holding Phoenix; the harness cannot run without it."""
    configured = os.environ.get(PYTHON_ENV_VAR)
    python = Path(configured) if configured else ROOT / ".venv-phoenix" / "bin" / "python"
    if not python.exists():
        raise RuntimeError(
            f"Phoenix is not installed: run `make phoenix` (or set {PYTHON_ENV_VAR}); {python} does not exist"
        )
    return python


def _free_port() -> int:
    """A port free on every interface: Phoenix's gRPC server binds ``[::]`` whatever PHOENIX_HOST says."""
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        address: tuple = ("::", 0)
    except OSError:  # no IPv6 on this machine
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        address = ("0.0.0.0", 0)
    with sock:
        sock.bind(address)
        return sock.getsockname()[1]


class PhoenixServer:
    """One Phoenix process on two free loopback ports, with its data and log in a temporary directory."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._http_port: int | None = None
        self._grpc_port: int | None = None

    @property
    def http_endpoint(self) -> str:
        """Base URL of the HTTP server: OTLP/HTTP goes to ``{http_endpoint}/v1/traces``, REST reads from here."""
        return f"http://127.0.0.1:{self._require_started(self._http_port)}"

    @property
    def grpc_endpoint(self) -> str:
        """Address of the OTLP/gRPC receiver (plaintext)."""
        return f"http://127.0.0.1:{self._require_started(self._grpc_port)}"

    @property
    def log_path(self) -> Path:
        """The server's combined stdout and stderr, for diagnosing a failed test."""
        return self._require_started(self._workdir) / "server.log"

    def start(self, timeout: float = 90) -> None:
        """Spawn Phoenix and wait until ``/healthz`` answers; raise RuntimeError with the log's tail otherwise.

        A fresh database takes 12-14 s to come up on a small machine, most of it Python imports.
        """
        if self._process is not None:
            raise RuntimeError("Phoenix server already started")
        python = _phoenix_python()
        self._http_port = _free_port()
        self._grpc_port = _free_port()
        while self._grpc_port == self._http_port:
            self._grpc_port = _free_port()
        self._workdir = Path(tempfile.mkdtemp(prefix="sparkrun-phoenix-"))

        # Inherited PHOENIX_* settings (a database URL, auth, ...) must not leak into the test server,
        # nor the test runner's PYTHONPATH into Phoenix's venv.
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_") and k != "PYTHONPATH"}
        env.update(
            _SERVER_ENV,
            PHOENIX_PORT=str(self._http_port),
            PHOENIX_GRPC_PORT=str(self._grpc_port),
            PHOENIX_WORKING_DIR=str(self._workdir),
        )
        # A file rather than a pipe: nobody drains a pipe, and a full one would stall the server.
        with open(self.log_path, "wb") as log:
            self._process = subprocess.Popen(
                [str(python), "-m", "phoenix.server.main", "serve"],
                cwd=self._workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

        deadline = time.monotonic() + timeout
        while True:
            returncode = self._process.poll()
            if returncode is not None:
                self._fail(f"Phoenix exited with code {returncode} before becoming healthy")
            if self._healthy():
                return
            if time.monotonic() > deadline:
                self._fail(f"Phoenix did not answer {self.http_endpoint}/healthz within {timeout} s")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s) and delete its directory; safe to call twice."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        # A return code of -SIGTERM is normal: uvicorn re-raises the signal after a graceful shutdown.
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def spans(
        self, trace_id: str | int, *, min_count: int = 1, timeout: float = 15.0, named: str | None = None
    ) -> list[dict]:
        """Spans of one trace in the ``default`` project, as the REST API returns them.

        Ingestion is asynchronous (an export returns before the spans are stored), so this polls until
        at least ``min_count`` spans (of those ``named`` so, if given: several processes may export to one
        trace, each in its own time) are visible and raises AssertionError if they are not within
        ``timeout``. ``trace_id`` is an OpenTelemetry int or 32 hex digits.
        """
        trace_hex = f"{trace_id:032x}" if isinstance(trace_id, int) else trace_id.lower()
        deadline = time.monotonic() + timeout
        while True:
            found = self._spans_once(trace_hex)
            if len([span for span in found if named in (None, span["name"])]) >= min_count:
                return found
            if time.monotonic() > deadline:
                names = sorted(span["name"] for span in found)
                raise AssertionError(
                    f"expected at least {min_count} span(s) of trace {trace_hex} in Phoenix within {timeout} s, "
                    f"found {len(found)}: {names}"
                )
            time.sleep(0.05)

    def _spans_once(self, trace_hex: str) -> list[dict]:
        found: list[dict] = []
        cursor: str | None = None
        while True:
            query = [("trace_id", trace_hex), ("limit", "1000")]
            if cursor:
                query.append(("cursor", cursor))
            url = f"{self.http_endpoint}/v1/projects/default/spans?{urllib.parse.urlencode(query)}"
            with _opener.open(url, timeout=5) as response:
                page = json.load(response)
            found.extend(page["data"])
            cursor = page.get("next_cursor")
            if not cursor:
                return found

    def _healthy(self) -> bool:
        try:
            with _opener.open(f"{self.http_endpoint}/healthz", timeout=2) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def _fail(self, reason: str) -> NoReturn:
        tail = self._log_tail()
        self.stop()
        raise RuntimeError(f"{reason}; last lines of its log:\n{tail}")

    def _log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_bytes().decode(errors="replace")
        except OSError as exc:
            return f"(log unreadable: {exc})"
        return "\n".join(text.splitlines()[-lines:]) or "(the log is empty)"

    @staticmethod
    def _require_started(value: _T | None) -> _T:
        if value is None:
            raise RuntimeError("Phoenix server not started")
        return value
