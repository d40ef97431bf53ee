"""The example OpenAI-compatible workload as a real process on loopback, for the tests that drive it."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "examples" / "workloads" / "openai_server.py"
MODEL = "example-model"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerProcess:
    """The server as a subprocess; threads drain its output so the pipes never fill up."""

    def __init__(
        self, *extra: str, launcher: Sequence[str] | None = None, env: Mapping[str, str] | None = None
    ) -> None:
        """``launcher`` replaces ``python openai_server.py`` (another interpreter, a wrapper); ``env`` the environ."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [*(launcher or [sys.executable, str(SERVER)])]
        command += ["--host", "127.0.0.1", "--port", str(self.port), "--model", MODEL, *extra]
        self.proc = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._readers = [
            threading.Thread(target=self._drain, args=(self.proc.stdout, self.stdout), daemon=True),
            threading.Thread(target=self._drain, args=(self.proc.stderr, self.stderr), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _drain(stream: Any, lines: list[str]) -> None:
        for line in stream:
            lines.append(line.rstrip("\n"))

    def wait_for_output(self, text: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(text in line for line in self.stdout):
            assert time.monotonic() < deadline, f"no {text!r} in stdout: {self.stdout}"
            time.sleep(0.02)

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc.poll() is None, f"server exited early: {self.stderr}"
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass
            assert time.monotonic() < deadline, "server did not answer /health within the timeout"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        for reader in self._readers:
            reader.join(timeout=5)


def call(url: str, method: str = "GET", body: bytes | dict | None = None) -> tuple[int, Any, bytes]:
    """Status, headers and raw body, for error statuses too."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.headers, exc.read()
