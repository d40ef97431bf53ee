"""sparkrun driving the example ColdSnap controller for real: a recipe on two loopback hosts, cleanup of servers.

Every :class:`Snap` gets its own state directory, controller state, free port and recipe; ``cleanup``
kills whatever example server or controller it left running, even when a test failed half way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER = ROOT / "examples" / "coldsnap" / "controller.py"
SERVER = ROOT / "examples" / "workloads" / "openai_server.py"
HOSTS = ("127.0.0.1", "127.0.0.2")
SECRET = "snap-secret-0f3a9c7e"  # in the recipe's environment: it must reach the workload and nothing else
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port(hosts: tuple[str, ...] = HOSTS) -> int:
    """A port free on every one of ``hosts``."""
    while True:
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port: int = probe.getsockname()[1]
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


class Snap:
    """One workload under ColdSnap in a temporary directory."""

    def __init__(self, root: Path, *, hosts: tuple[str, ...] = HOSTS, startup_delay: float = 0.3) -> None:
        self.root = root
        self.state_dir = root / "state"
        self.controller_state = root / "controller"
        self.hosts = hosts
        self.port = free_port(hosts)
        self.recipe = root / "snap.yaml"
        self.recipe.write_text(
            f"""\
recipe_version: "1"
name: snap
runtime: process
command: "{{python}} {SERVER} --host {{host}} --port {{port}} --model {{model}} --startup-delay {{startup_delay}}"
defaults: {{model: tiny-echo, startup_delay: {startup_delay}}}
env: {{PYTHONUNBUFFERED: "1", SNAP_TOKEN: {SECRET}}}
hosts: [{", ".join(hosts)}]
port: {self.port}
readiness: {{http_path: /health, timeout: 30}}
model: tiny-echo
coldsnap:
  snapshot_driver: n580
  policy: {{cancel_grace_seconds: 20}}
""",
            encoding="utf-8",
        )

    def controller(self, *modes: str) -> str:
        """The example controller's command line, misbehaving as ``modes`` say."""
        words = [sys.executable, str(CONTROLLER), "--state-dir", str(self.controller_state)]
        for mode in modes:
            words += ["--misbehave", mode]
        import shlex

        return shlex.join(words)

    def argv(self, operation: str, *args: str, modes: tuple[str, ...] = (), target: str | None = None) -> list[str]:
        return [
            sys.executable,
            "-m",
            "sparkrun",
            "coldsnap",
            operation,
            target or str(self.recipe),
            "--controller",
            self.controller(*modes),
            "--state-dir",
            str(self.state_dir),
            *args,
        ]

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
        return {**env, "SPARKRUN_CONFIG": str(self.root / "no-config.yaml"), "COLUMNS": "200"}

    def cli(
        self,
        operation: str,
        *args: str,
        modes: tuple[str, ...] = (),
        target: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(operation, *args, modes=modes, target=target),
            cwd=self.root,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def result(self, operation: str, *args: str, modes: tuple[str, ...] = ()) -> tuple[dict[str, Any], list[dict]]:
        """Run with ``--json``: the result record and the events before it."""
        done = self.cli(operation, "--json", *args, modes=modes)
        assert done.returncode == 0, done.stderr
        records = [json.loads(line) for line in done.stdout.splitlines()]
        assert records[-1]["type"] == "result"
        return records[-1], records[:-1]

    def chat(self, host: str, text: str = "hello snap") -> str | None:
        """The workload's answer on ``host``, or None if nothing answers there."""
        body = json.dumps({"model": "tiny-echo", "messages": [{"role": "user", "content": text}]}).encode()
        request = urllib.request.Request(
            f"http://{host}:{self.port}/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with _opener.open(request, timeout=5) as response:
                return str(json.load(response)["choices"][0]["message"]["content"])
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def leftovers(self) -> list[int]:
        """Pids of this test's example servers and controllers still running."""
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            words = _cmdline(int(entry.name))
            server = str(SERVER) in words and str(self.port) in words
            controller = str(CONTROLLER) in words and str(self.controller_state) in words
            if server or controller:
                found.append(int(entry.name))
        return found

    def cleanup(self) -> None:
        for pid in self.leftovers():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
