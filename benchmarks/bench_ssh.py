"""Fan-out of the SSH executor: launch, stop and status on 1, 2 and 4 hosts, as ratios to 1 host.

The hosts are the real OpenSSH servers on loopback of ``tests/integration/ssh_hosts.py`` (an sshd,
a unix user and a home each; root and ``/usr/sbin/sshd`` needed). The workload is trivial on
purpose: ``{python} -m http.server {port} --bind {host}``, ready once its port accepts connections,
so what grows with the host count is sparkrun's own fan-out, not the workload.

- launch and stop (``api.run`` / ``api.stop``) of a recipe on 1, 2 and 4 hosts, ``--repeat``
  rounds (default 5), the host counts interleaved in every round (1, 2, 4, 1, 2, 4, ...) so that
  drift hits them all alike; medians. A warm-up launch+stop on 4 hosts comes first, so master
  connections are up; that cold first call, and a cold 1-host launch, are printed for information.
- status with a 4-host and a 1-host deployment running (each in a state directory of its own,
  since a status asks about every recorded deployment), interleaved, ``--status-repeat`` times
  (default 20) after a first call: ``api.status`` in this process, and ``sparkrun status --json``
  in a new process each time (half as many), as users run it, reusing the persisted master.
  The CLI's own floor (the same command on an empty state directory) is printed beside it.
- floors, for reading the ratios: over the same master connections, ``ssh <host> true`` and
  ``ssh <host> python3 -c pass`` on 1 host and on 4 at once. The test hosts share this machine's
  CPUs, so when the floor's 4-host ratio is already high, the machine, not the fan-out, sets it.

Targets: the 4-host launch takes at most 1.5x the 1-host launch (parallel fan-out), and a 4-host
status after the first call (connections reused) at most 1.2x a 1-host status. Each target's
line says met or missed; timings never decide the exit status (non-zero only if the benchmark
itself fails). Everything launched is stopped in the end; the state lives in a temporary
directory. Usage: ``python benchmarks/bench_ssh.py [--repeat N] [--status-repeat M]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from sparkrun import api
from sparkrun.application import initialize
from sparkrun.core.context import SparkrunContext
from sparkrun.core.executors import Executors
from sparkrun.core.executors.ssh import SshExecutor
from sparkrun.core.executors.ssh_transport import SshTransport

ROOT = Path(__file__).resolve().parents[1]
COUNTS = (1, 2, 4)
LAUNCH_TARGET = 1.5
STATUS_TARGET = 1.2


def _ssh_hosts(count: int) -> Any:
    """The loopback test hosts of tests/integration (stdlib only), imported with the repository root on the path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.integration.ssh_hosts import SshHosts

    return SshHosts(count)


def _recipe(directory: Path, name: str, hosts: list[str]) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(
        f'recipe_version: "1"\n'
        f"name: {name}\n"
        f"runtime: process\n"
        f'command: "{{python}} -m http.server {{port}} --bind {{host}}"\n'
        f"hosts: [{', '.join(hosts)}]\n"
        f"readiness:\n  timeout: 20\n",
        encoding="utf-8",
    )
    return path


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def _launch(recipe: Path, sctx: SparkrunContext) -> float:
    seconds, _ = _timed(lambda: api.run(api.RunOptions(recipe=str(recipe)), sctx=sctx))
    return seconds


def _stop(name: str, sctx: SparkrunContext) -> float:
    seconds, _ = _timed(lambda: api.stop(name, sctx=sctx))
    return seconds


def _status(sctx: SparkrunContext, hosts: int) -> float:
    """One ``api.status``; it must see one deployment running on ``hosts`` hosts, or the figure means nothing."""
    seconds, found = _timed(lambda: api.status(sctx=sctx))
    states = [(status.state, len(status.hosts)) for status in found]
    if states != [("running", hosts)]:
        raise RuntimeError(f"status saw {states}, expected one deployment running on {hosts} host(s)")
    return seconds


def _cli_status(env: dict[str, str], hosts: int) -> float:
    """``sparkrun status --json`` in a new process; ``hosts=0`` is the empty state directory (the CLI floor)."""
    sparkrun = Path(sys.executable).with_name("sparkrun")
    argv = [str(sparkrun)] if sparkrun.exists() else [sys.executable, "-m", "sparkrun"]
    seconds, done = _timed(
        lambda: subprocess.run([*argv, "status", "--json"], env=env, capture_output=True, text=True, timeout=60)
    )
    if done.returncode != 0:
        raise RuntimeError(f"sparkrun status --json failed with code {done.returncode}: {done.stderr.strip()}")
    found = json.loads(done.stdout)
    expected = [("running", hosts)] if hosts else []
    if [(item["state"], len(item["hosts"])) for item in found] != expected:
        raise RuntimeError(f"sparkrun status --json said {done.stdout.strip()}, expected {expected}")
    return seconds


def _cli_env(config: Path, state_dir: Path) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "SPARKRUN_"))}
    env.update(SPARKRUN_CONFIG=str(config), SPARKRUN_STATE_DIR=str(state_dir), SPARKRUN_OTEL="0")
    return env


def _floor(transports: list[SshTransport], remote: list[str]) -> float:
    """``remote`` over each transport's master connection, all at once; seconds until the last one ends."""

    def one(transport: SshTransport) -> None:
        subprocess.run(transport.argv(*remote), stdin=subprocess.DEVNULL, capture_output=True, check=True, timeout=30)

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=len(transports)) as pool:
        list(pool.map(one, transports))
    return time.perf_counter() - started


def _transports(sctx: SparkrunContext, names: list[str]) -> list[SshTransport]:
    """The ssh transports of ``names`` for this context's state directory (so its master sockets)."""
    executors = Executors(sctx.config)
    chosen = [executors.for_host(name) for name in names]
    return [executor.transport for executor in chosen if isinstance(executor, SshExecutor)]


def _interleaved(cases: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Every case once per round, in the same order; the median seconds of each."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            samples[name].append(case())
    return {name: statistics.median(values) for name, values in samples.items()}


@contextlib.contextmanager
def _cleanup(contexts: list[SparkrunContext], names: list[str]) -> Iterator[None]:
    """Stop every deployment of ``contexts`` and close their master connections, whatever happens."""
    try:
        yield
    finally:
        for sctx in contexts:
            try:
                api.stop(all=True, sctx=sctx)
            except Exception as error:  # report it, and still clean up the rest
                print(f"cleanup: stopping in {sctx.config.state_dir} failed: {error}", file=sys.stderr)
            for transport in _transports(sctx, names):
                with contextlib.suppress(Exception):
                    transport.close()


def _row(label: str, values: dict[int, float]) -> str:
    cells = [f"{values[n]:>8.3f}" if n in values else f"{'-':>8}" for n in COUNTS]
    ratios = [f"{values[n] / values[1]:>6.2f}x" if n in values else f"{'-':>7}" for n in COUNTS[1:]]
    return f"{label:<44} {' '.join(cells)}  {' '.join(ratios)}"


def _verdict(name: str, ratio: float, target: float) -> str:
    return f"{name}: {ratio:.2f}x, target <= {target:g}x: {'met' if ratio <= target else 'missed'}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds of launch+stop per host count (default 5)")
    parser.add_argument("--status-repeat", type=int, default=20, help="status calls per case (default 20)")
    args = parser.parse_args()
    began = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="sparkrun-bench-ssh-"))
    try:
        with _ssh_hosts(4) as hosts:
            return _run(hosts, scratch, max(args.repeat, 1), max(args.status_repeat, 1), began)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(hosts: Any, scratch: Path, repeat: int, status_repeat: int, began: float) -> int:
    names = [host.name for host in hosts.hosts]
    config = scratch / "config.yaml"
    config.write_text(yaml.safe_dump({"hosts": hosts.inventory()}), encoding="utf-8")
    recipes = {n: _recipe(scratch, f"bench-{n}", names[:n]) for n in COUNTS}
    status_one, status_four = _recipe(scratch, "status-1", names[:1]), _recipe(scratch, "status-4", names)
    # One state directory for the launch/stop rounds and the 4-host status, one for the 1-host status
    # (a status asks about every deployment it finds), one left empty for the CLI's floor.
    shared, one, empty = (scratch / "state", scratch / "state-1", scratch / "state-empty")
    sctx = initialize(config_path=config, state_dir=shared)
    sctx_one = initialize(config_path=config, state_dir=one)
    cold: dict[str, float] = {}
    with _cleanup([sctx, sctx_one], names):
        cold["first launch, 1 host (starts its master)"] = _launch(status_one, sctx_one)
        cold["first launch, 4 hosts (starts 4 masters)"] = _launch(recipes[4], sctx)
        cold["first stop, 4 hosts (masters up)"] = _stop("bench-4", sctx)

        launch: dict[int, float] = {}
        stop: dict[int, float] = {}
        samples: dict[str, list[float]] = {f"{kind}{n}": [] for kind in ("launch", "stop") for n in COUNTS}
        for _ in range(repeat):
            for n in COUNTS:
                samples[f"launch{n}"].append(_launch(recipes[n], sctx))
                samples[f"stop{n}"].append(_stop(f"bench-{n}", sctx))
        for n in COUNTS:
            launch[n] = statistics.median(samples[f"launch{n}"])
            stop[n] = statistics.median(samples[f"stop{n}"])

        _launch(status_four, sctx)
        cold["first status, 1 host"] = _status(sctx_one, 1)
        cold["first status, 4 hosts"] = _status(sctx, 4)
        status = _interleaved({"1": lambda: _status(sctx_one, 1), "4": lambda: _status(sctx, 4)}, status_repeat)
        env_one, env_four, env_empty = (_cli_env(config, path) for path in (one, shared, empty))
        cli = _interleaved(
            {
                "0": lambda: _cli_status(env_empty, 0),
                "1": lambda: _cli_status(env_one, 1),
                "4": lambda: _cli_status(env_four, 4),
            },
            max(status_repeat // 2, 1),
        )
        transports = _transports(sctx, names)
        floors = _interleaved(
            {
                "true1": lambda: _floor(transports[:1], ["true"]),
                "true4": lambda: _floor(transports, ["true"]),
                "py1": lambda: _floor(transports[:1], ["python3", "-c", "pass"]),
                "py4": lambda: _floor(transports, ["python3", "-c", "pass"]),
            },
            status_repeat,
        )

    print(
        f"SSH executor on {len(names)} loopback hosts (an sshd each) sharing {os.cpu_count()} CPUs; "
        f"medians of {repeat} launch/stop rounds and {status_repeat} status calls ({max(status_repeat // 2, 1)} CLI)"
    )
    print("warm-up: one launch+stop on 4 hosts before the rounds, so every master connection was up")
    print("first calls, for information (not in the medians):")
    for label, seconds in cold.items():
        print(f"  {label:<42} {seconds:>8.3f} s")
    print(f"{'median seconds':<44} {'1 host':>8} {'2 hosts':>8} {'4 hosts':>8}  {'2h/1h':>7} {'4h/1h':>7}")
    print(_row("launch (api.run)", launch))
    print(_row("stop (api.stop)", stop))
    print(_row("status (api.status, after the first)", {1: status["1"], 4: status["4"]}))
    print(_row("status (sparkrun status --json, new process)", {1: cli["1"], 4: cli["4"]}))
    print(f"{'  CLI floor: same command, no deployment':<44} {cli['0']:>8.3f}")
    print(_row("floor: ssh host true, over the master", {1: floors["true1"], 4: floors["true4"]}))
    print(_row("floor: ssh host python3 -c pass", {1: floors["py1"], 4: floors["py4"]}))
    print("(the hosts share this machine's CPUs: the floor rows are what 4 parallel sessions cost here)")
    print(f"runtime {time.monotonic() - began:.1f} s")
    print(_verdict("4-host launch / 1-host launch", launch[4] / launch[1], LAUNCH_TARGET))
    print(_verdict("4-host status / 1-host status (api.status)", status["4"] / status["1"], STATUS_TARGET))
    print(_verdict("4-host status / 1-host status (CLI, new process)", cli["4"] / cli["1"], STATUS_TARGET))
    return 0


if __name__ == "__main__":
    sys.exit(main())
