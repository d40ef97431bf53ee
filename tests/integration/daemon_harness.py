"""A real ``sparkrun daemon serve`` process for integration tests, always cleaned up.

The daemon runs with the test operations of :mod:`tests.integration.daemon_plugins`
(through ``daemon.plugins`` in a configuration file of its own), an environment
without the caller's ``OTEL_*`` / ``SPARKRUN_*`` settings, and traces off unless a
test asks for them. :meth:`DaemonProcess.stop` ends the daemon, any worker process
group the journal still names, and every deployment recorded in the state dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from sparkrun.daemon.client import StreamEvent, parse_sse

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = "tests.integration.daemon_plugins"
TERMINAL = ("succeeded", "failed", "cancelled", "lost")
EXAMPLE_RECIPE = ROOT / "examples" / "recipes" / "example-chat.yaml"


def wait_for(predicate: Callable[[], Any], *, timeout: float = 30.0, interval: float = 0.05, what: str = "") -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or predicate}")
        time.sleep(interval)


def process_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes of process group ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def group_alive(pgid: int) -> bool:
    """Whether any live process is in process group ``pgid``."""
    return bool(group_members(pgid))


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def daemon_environment(*, otel: bool = False, config: Path | None = None) -> dict[str, str]:
    """os.environ without OTEL_* / SPARKRUN_*, with this repository importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "SPARKRUN_"))}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    if config is not None:
        env["SPARKRUN_CONFIG"] = str(config)
    if not otel:
        env["SPARKRUN_OTEL"] = "0"
    return env


class DaemonProcess:
    """One daemon on a temporary state dir; use as a context manager."""

    def __init__(
        self,
        root: Path,
        *,
        args: tuple[str, ...] = (),
        otel: bool = False,
        state_dir: Path | None = None,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
    ) -> None:
        self.root = root
        self.root.mkdir(parents=True, exist_ok=True)
        self.state_dir = state_dir or root / "state"
        self.config = root / "config.yaml"
        self.config.write_text(f"daemon:\n  plugins: [{PLUGINS}]\n", encoding="utf-8")
        self.args, self.otel = args, otel
        self.env = {**daemon_environment(otel=otel, config=self.config), **(env or {})}
        self.nofile = nofile  # a lower limit on open files for the daemon process
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.token = ""
        self.http: httpx.Client | None = None
        self._logs: list[Path] = []
        self.last_log: Path | None = None
        self._worker_pids: set[int] = set()

    # -- life cycle -------------------------------------------------------------------

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "sparkrun",
            "daemon",
            "serve",
            "--state-dir",
            str(self.state_dir),
            "--port",
            "0",
            *self.args,
        ]

    def spawn(self, argv: list[str] | None = None) -> subprocess.Popen[bytes]:
        """Start a daemon process (not waiting for it); its output goes to :attr:`last_log`."""
        log = self.last_log = self.root / f"daemon-{len(self._logs)}.log"
        self._logs.append(log)
        limit = self.nofile

        def lower_file_limit() -> None:
            if limit is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

        with open(log, "wb") as output:
            return subprocess.Popen(
                argv or self.argv(),
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lower_file_limit if limit is not None else None,
            )

    @property
    def info_path(self) -> Path:
        return self.state_dir / "daemon" / "daemon.json"

    @property
    def token_path(self) -> Path:
        return self.state_dir / "daemon" / "token"

    def start(self, timeout: float = 30.0) -> DaemonProcess:
        self.info_path.unlink(missing_ok=True)  # a record a killed daemon left must not be mistaken for ours
        self.process = process = self.spawn()

        def ready() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the daemon exited with code {process.returncode}:\n{self.output()}")
            try:
                info = json.loads(self.info_path.read_text(encoding="utf-8"))
                return httpx.get(f"{info['url']}/v1/health", timeout=2).status_code == 200
            except (OSError, ValueError, KeyError, httpx.HTTPError):
                return False

        wait_for(ready, timeout=timeout, what="the daemon to answer /v1/health")
        info = json.loads(self.info_path.read_text(encoding="utf-8"))
        assert info["pid"] == process.pid
        self.url = info["url"]
        self.token = self.token_path.read_text(encoding="utf-8").strip()
        if self.http is not None:
            self.http.close()
        self.http = httpx.Client(base_url=self.url, headers=self.auth, timeout=30)
        return self

    def output(self) -> str:
        """Everything the daemon processes of this harness printed."""
        return "\n".join(log.read_text(encoding="utf-8", errors="replace") for log in self._logs if log.exists())

    def kill9(self) -> None:
        """``kill -9`` the daemon (its workers live on in their own sessions until restart)."""
        assert self.process is not None
        self._remember_workers()
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM the daemon (SIGKILL if it lingers), then kill what it may have left behind."""
        self._remember_workers()
        if self.http is not None:
            self.http.close()
            self.http = None
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._remember_workers()
        for pgid in self._worker_pids:
            # Only groups that still hold a sparkrun process: a pid may have been reused since.
            if any(b"sparkrun" in _cmdline(pid) for pid in group_members(pgid)):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
        self._stop_deployments()

    def __enter__(self) -> DaemonProcess:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _remember_workers(self) -> None:
        journal = self.state_dir / "daemon" / "journal.sqlite3"
        if not journal.exists():
            return
        with contextlib.suppress(sqlite3.Error):
            db = sqlite3.connect(f"file:{journal}?mode=ro", uri=True, timeout=5)
            try:
                rows = db.execute("SELECT worker_pid FROM jobs WHERE worker_pid IS NOT NULL").fetchall()
            finally:
                db.close()
            self._worker_pids.update(pid for (pid,) in rows)

    def _stop_deployments(self) -> None:
        from sparkrun.core.deployments import DeploymentStore

        for deployment in DeploymentStore(self.state_dir).all():
            for placement in deployment.placements:
                if placement.ssh is not None or not placement.identity.matches():
                    continue  # remote workloads end with their test host
                for kill in (os.killpg, os.kill):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        kill(placement.pid, signal.SIGKILL)

    # -- HTTP -------------------------------------------------------------------------

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    @property
    def client(self) -> httpx.Client:
        assert self.http is not None, "the daemon is not running"
        return self.http

    def submit(self, operation: str, **arguments: Any) -> dict[str, Any]:
        response = self.client.post("/v1/jobs", json={"operation": operation, "arguments": arguments})
        assert response.status_code == 202, response.text
        return response.json()

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.client.get(f"/v1/jobs/{job_id}")
        assert response.status_code == 200, response.text
        return response.json()

    def wait_state(self, job_id: str, *states: str, timeout: float = 60.0) -> dict[str, Any]:
        """The job once it is in one of ``states`` (default: any terminal state)."""
        wanted = states or TERMINAL

        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["state"] in wanted else None

        return wait_for(reached, timeout=timeout, interval=0.05, what=f"job {job_id} to be {'/'.join(wanted)}")

    def replay(self, job_id: str, **params: Any) -> list[StreamEvent]:
        """Every event the stream delivers with ``follow=false`` (and the params given)."""
        params = {"follow": "false", **params}
        with self.client.stream("GET", f"/v1/jobs/{job_id}/events", params=params, timeout=60) as response:
            assert response.status_code == 200, response.read().decode()
            return list(parse_sse(response.iter_lines()))

    def run_cli(self, *args: str, input: str | None = None, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """``sparkrun ARGS --state-dir STATE`` in a subprocess with the daemon's environment."""
        return subprocess.run(
            [sys.executable, "-m", "sparkrun", *args, "--state-dir", str(self.state_dir)],
            cwd=ROOT,
            env=self.env,
            input=input,
            capture_output=True,
            start_new_session=True,  # no controlling terminal: hidden prompts read stdin
            text=True,
            timeout=timeout,
        )


# -- helpers shared by the test_daemon_* modules ------------------------------------------


def message_events(events: list[StreamEvent]) -> list[StreamEvent]:
    """The ``message`` events of ``events`` (without ``gap`` and ``end``)."""
    return [event for event in events if event.name == "message"]


def journal_rows(daemon: DaemonProcess, job_id: str) -> list[tuple[int, dict]]:
    """The job's events as stored in the journal, read straight from SQLite."""
    db = sqlite3.connect(f"file:{daemon.state_dir / 'daemon' / 'journal.sqlite3'}?mode=ro", uri=True, timeout=5)
    try:
        rows = db.execute("SELECT seq, body FROM events WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()
    finally:
        db.close()
    return [(seq, json.loads(body)) for seq, body in rows]


def running_with_events(daemon: DaemonProcess, job_id: str, count: int = 1) -> dict[str, Any]:
    """The job once it runs and has journaled at least ``count`` events."""

    def ready() -> dict[str, Any] | None:
        job = daemon.job(job_id)
        assert job["state"] in ("queued", "running"), job
        return job if job["state"] == "running" and job["last_seq"] >= count else None

    return wait_for(ready, timeout=30, what=f"job {job_id} to run and report {count} event(s)")


def run_example(daemon: DaemonProcess) -> dict[str, Any]:
    """The succeeded job that ran the example recipe through ``daemon``."""
    job_id = daemon.submit("run", recipe=str(EXAMPLE_RECIPE))["job_id"]
    job = daemon.wait_state(job_id, timeout=90)
    assert job["state"] == "succeeded", job
    return job
