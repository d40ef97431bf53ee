"""Event stream latency and replay time, against a real daemon process.

Starts ``python -m sparkrun daemon serve --port 0`` on a scratch state directory
(OpenTelemetry off, plugins ``tests.integration.daemon_plugins`` and this directory's
``_stream_ops``), then measures:

- emit-to-client latency: the ``pace`` operation emits 500 events 2 ms apart, each
  carrying its emit time (``metrics.sent_at``, ``time.time()`` in the worker); an httpx
  client following ``GET /v1/jobs/{id}/events`` records receive time minus emit time.
  The whole path is measured: worker pipe, journal commit, wake-up, SSE, HTTP.
- replay time: the ``burst`` operation journals 4,096 events; once it has succeeded,
  ``GET /v1/jobs/{id}/events?follow=false`` is read to its end (best of 5; events are
  counted after the clock stops).
- in-run baseline: the same rows read straight from ``journal.sqlite3`` with sqlite3
  (connect, SELECT, fetchall; best of 5), so the replay figure has a local yardstick.

Targets (issue 5): p50 <= 10 ms, p99 <= 50 ms, replay < 150 ms. Exits 1 if a target
is missed. The daemon is always stopped. Usage: ``python benchmarks/bench_stream.py``.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from _table import Target, print_ratios, verdict

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
PACE_EVENTS = 500
PACE_INTERVAL = 0.002
PACE_DELAY = 1.0  # seconds the job waits before its first event, so the client is already following
REPLAY_EVENTS = 4_096
REPLAY_ROUNDS = 5
MAX_P50_MS = 10.0
MAX_P99_MS = 50.0
MAX_REPLAY_MS = 150.0
START_TIMEOUT = 30.0
JOB_TIMEOUT = 30.0


class _Daemon:
    """One ``sparkrun daemon serve`` process on a scratch state directory."""

    def __init__(self, tmp: Path) -> None:
        self.state_dir = tmp / "state"
        self.directory = self.state_dir / "daemon"
        config = tmp / "config.yaml"
        config.write_text("daemon:\n  plugins: [tests.integration.daemon_plugins, _stream_ops]\n", encoding="utf-8")
        env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
        env.pop("SPARKRUN_STATE_DIR", None)
        env.update(
            SPARKRUN_CONFIG=str(config),
            SPARKRUN_OTEL="0",
            PYTHONPATH=os.pathsep.join([str(REPO), str(BENCH_DIR)]),
        )
        self.log_path = tmp / "daemon.out"
        argv = [sys.executable, "-m", "sparkrun", "daemon", "serve", "--state-dir", str(self.state_dir), "--port", "0"]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        self.url = ""
        self.token = ""

    def wait_ready(self) -> None:
        """Wait for ``daemon.json`` and a healthy ``/v1/health``; then read the token."""
        deadline = time.monotonic() + START_TIMEOUT
        info_path = self.directory / "daemon.json"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the daemon exited with code {self.process.returncode}:\n{self._output()}")
            try:
                self.url = json.loads(info_path.read_text(encoding="utf-8"))["url"]
                if httpx.get(f"{self.url}/v1/health", timeout=2, trust_env=False).status_code == 200:
                    self.token = (self.directory / "token").read_text(encoding="utf-8").strip()
                    return
            except (OSError, ValueError, KeyError, httpx.HTTPError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"the daemon was not ready within {START_TIMEOUT:g} s:\n{self._output()}")

    def stop(self) -> None:
        """SIGTERM (the daemon stops its workers), then SIGKILL of its group if it lingers."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def _output(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-4000:]
        except OSError:
            return ""


def _submit(client: httpx.Client, operation: str, arguments: dict[str, Any]) -> str:
    response = client.post("/v1/jobs", json={"operation": operation, "arguments": arguments})
    if response.status_code != 202:
        raise RuntimeError(f"submitting {operation} failed: {response.status_code} {response.text}")
    return response.json()["job_id"]


def _wait_finished(client: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_TIMEOUT
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled", "lost"):
            return job
        time.sleep(0.05)
    raise RuntimeError(f"job {job_id} did not finish within {JOB_TIMEOUT:g} s")


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def _latencies_ms(client: httpx.Client) -> list[float]:
    """Receive time minus emit time of every event of one ``pace`` job, followed live."""
    arguments = {"count": PACE_EVENTS, "interval": PACE_INTERVAL, "delay": PACE_DELAY}
    job_id = _submit(client, "pace", arguments)
    latencies: list[float] = []
    first_sent: float | None = None
    with client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=None) as response:
        if response.status_code != 200:
            raise RuntimeError(f"the event stream answered {response.status_code}")
        subscribed = time.time()
        name = "message"
        for line in response.iter_lines():
            received = time.time()
            if line.startswith("event:"):
                name = line.partition(":")[2].strip()
            elif line.startswith("data:"):
                data = json.loads(line.partition(":")[2])
                if name == "end":
                    if data["state"] != "succeeded":
                        raise RuntimeError(f"the pace job ended {data['state']}")
                    break
                sent_at = data["metrics"]["sent_at"]
                first_sent = sent_at if first_sent is None else first_sent
                latencies.append((received - sent_at) * 1000)
            elif not line:
                name = "message"
    if len(latencies) != PACE_EVENTS:
        raise RuntimeError(f"received {len(latencies)} pace events, expected {PACE_EVENTS}")
    if first_sent is None or first_sent < subscribed:
        raise RuntimeError("the client subscribed after the first event; latencies would include replay")
    return latencies


def _replay(client: httpx.Client) -> tuple[str, float]:
    """Best time (ms) to read a finished job's 4,096 events with ``follow=false``."""
    job_id = _submit(client, "burst", {"count": REPLAY_EVENTS})
    job = _wait_finished(client, job_id)
    if job["state"] != "succeeded" or job["first_retained"] != 1 or job["last_seq"] != REPLAY_EVENTS:
        raise RuntimeError(f"the burst job did not journal {REPLAY_EVENTS} events: {job}")
    best = float("inf")
    for _ in range(REPLAY_ROUNDS):
        started = time.perf_counter()
        with client.stream("GET", f"/v1/jobs/{job_id}/events", params={"follow": "false"}) as response:
            body = response.read()
        best = min(best, time.perf_counter() - started)
        text = body.decode()
        count = sum(1 for line in text.splitlines() if line.startswith("id: "))
        if response.status_code != 200 or count != REPLAY_EVENTS or "event: end" not in text:
            raise RuntimeError(f"replay returned {response.status_code} with {count} events")
    return job_id, best * 1000


def _sqlite_ms(journal: Path, job_id: str) -> float:
    """Best time (ms) to read the job's rows straight from the journal file."""
    best = float("inf")
    for _ in range(REPLAY_ROUNDS):
        started = time.perf_counter()
        db = sqlite3.connect(journal)
        rows = db.execute("SELECT seq, body FROM events WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()
        db.close()
        best = min(best, time.perf_counter() - started)
        if len(rows) != REPLAY_EVENTS:
            raise RuntimeError(f"the journal holds {len(rows)} rows for the burst job")
    return best * 1000


def main() -> int:
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="sparkrun-bench-stream-") as tmp:
        daemon = _Daemon(Path(tmp))
        try:
            daemon.wait_ready()
            headers = {"Authorization": f"Bearer {daemon.token}"}
            with httpx.Client(base_url=daemon.url, headers=headers, timeout=10, trust_env=False) as client:
                latencies = _latencies_ms(client)
                job_id, replay_ms = _replay(client)
            sqlite_ms = _sqlite_ms(daemon.directory / "journal.sqlite3", job_id)
        finally:
            daemon.stop()

    p50, p99 = statistics.median(latencies), _percentile(latencies, 0.99)
    rows = [
        (f"emit -> SSE client p50 ({PACE_EVENTS} events)", p50, f"<= {MAX_P50_MS:g}", p50 <= MAX_P50_MS),
        (f"emit -> SSE client p99 ({PACE_EVENTS} events)", p99, f"<= {MAX_P99_MS:g}", p99 <= MAX_P99_MS),
        (
            f"replay {REPLAY_EVENTS:,} events, follow=false",
            replay_ms,
            f"< {MAX_REPLAY_MS:g}",
            replay_ms < MAX_REPLAY_MS,
        ),
        (f"baseline: sqlite3 read of the same {REPLAY_EVENTS:,}", sqlite_ms, "-", True),
    ]
    print(f"daemon event stream ({sys.executable} -m sparkrun daemon serve, SPARKRUN_OTEL=0)")
    print(f"{'measure':<42} {'ms':>9} {'target':>9}  result")
    for label, value, target, ok in rows:
        result = "-" if target == "-" else "ok" if ok else "MISS"
        print(f"{label:<42} {value:>9.2f} {target:>9}  {result}")
    print(f"latency (ms): min {min(latencies):.2f}, p90 {_percentile(latencies, 0.9):.2f}, max {max(latencies):.2f}")
    print(f"\nreplay of {REPLAY_EVENTS:,} events against the in-run baseline (best of {REPLAY_ROUNDS})")
    print_ratios(
        {
            "sqlite3 direct read": sqlite_ms * 1000 / REPLAY_EVENTS,
            "HTTP SSE follow=false": replay_ms * 1000 / REPLAY_EVENTS,
        },
        "sqlite3 direct read",
    )
    print(f"\nruntime {time.monotonic() - started:.1f} s")
    return verdict(
        [Target(f"{label} {target} ms", f"{value:.2f} ms", ok) for label, value, target, ok in rows if target != "-"]
    )


if __name__ == "__main__":
    sys.exit(main())
