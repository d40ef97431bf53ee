"""Image relay to two SSH hosts: throughput against rsync over the same SSH transport, a second relay, memory.

The hosts are the real OpenSSH servers on loopback of ``tests/integration/ssh_hosts.py`` (an sshd, a unix
user and a home each; root and ``/usr/sbin/sshd`` needed). The image is built once by
``tests/integration/oci_images.py`` (umoci): ``--size-mib`` of random, incompressible bytes (default 1024)
in ``--layers`` layers (default 8). It needs about three times its size free on disk; the default run takes
about a minute on two CPUs. Sizes are in MB (10^6 bytes).

- first relay: ``api.distribute("image", "oci:LAYOUT:bench", [spark-1, spark-2])`` into empty image stores
  (removed before every round), the wall time of the call. Every relay runs in a fresh child process, as
  ``sparkrun distribute`` would.
- baseline: ``rsync -a --whole-file`` of the same blob files to a fresh directory in the same user's home
  on each host, both hosts at once, over the same ssh command line and the same master connection as the
  relay (``-o ControlMaster=no -o ControlPath=<its socket>``). Relay and rsync rounds alternate (``--repeat``,
  default 2, after a warm-up round of each that is printed but not counted) so drift hits both alike, with
  ``sync`` before each; medians. Throughput is the image's bytes times two hosts over the seconds; the
  relay's phases (from its feedback) show where its time goes.
- second relay: the same call again in the same child, right after the first (no ``force``): its wall time
  and the blob bytes it sent (``wire_bytes``, summed over the hosts).
- memory: the relay child's peak RSS (``ru_maxrss``), beside a child that only imports and initializes
  sparkrun; the receivers' peak RSS (``VmHWM``), sampled every 0.1 s from ``/proc`` for the host users'
  ``python3 -I -S -c`` agents (and, for information, their rsync processes).

Targets: relay throughput at least 0.8x rsync's; the second relay sends 0 blob bytes and takes under 1 s;
the sender and every receiver stay under 100 MB. Each target's line says met or missed; timings never decide
the exit status (non-zero only if the benchmark itself fails). The stores, the rsync copies, the image and
the master connections are removed in the end.
Usage: ``python benchmarks/bench_relay.py [--size-mib N] [--layers N] [--repeat N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import pwd
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from sparkrun import api
from sparkrun.application import initialize
from sparkrun.core.context import SparkrunContext
from sparkrun.core.executors import Executors
from sparkrun.core.executors.ssh import SshExecutor
from sparkrun.core.executors.ssh_transport import SshTransport
from sparkrun.plugins.oci_relay.layout import blob_path, read_image

ROOT = Path(__file__).resolve().parents[1]
TAG = "bench"
HOSTS = 2
MB = 1_000_000
THROUGHPUT_TARGET = 0.8
SECOND_RELAY_TARGET = 1.0
MEMORY_TARGET = 100 * MB
STAGES = ("checking", "discovering", "transferring", "importing", "verifying")
STORE = Path(".local") / "state" / "sparkrun" / "hosted" / "images"
RSYNC_DIR = "sparkrun-bench-rsync"
_CHILD = "--child"
_SAMPLE_INTERVAL = 0.1
_TIMEOUT = 900


def _test_support() -> tuple[Any, Callable[..., None]]:
    """``SshHosts`` and ``build_benchmark_image`` of tests/integration (stdlib only), repository root on the path."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.integration.oci_images import build_benchmark_image
    from tests.integration.ssh_hosts import SshHosts

    return SshHosts, build_benchmark_image


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


# -- the child process: one relay (or none, for the baseline), its figures as one JSON line ------------------


def _child(spec: dict[str, Any]) -> None:
    """Run in a fresh interpreter: initialize, relay twice unless ``mode`` is ``baseline``, print the figures."""
    marks: list[tuple[float, str, str]] = []

    def collect(event: dict[str, Any]) -> None:
        if event.get("type") == "feedback" and event.get("host"):
            marks.append((float(event.get("timestamp") or time.time()), str(event["host"]), event.get("stage") or ""))

    sctx = initialize(config_path=spec["config"], state_dir=spec["state"], events=collect)
    figures: dict[str, Any] = {}
    if spec["mode"] == "relay":

        def relay() -> Any:
            return api.distribute("image", spec["source"], spec["hosts"], sctx=sctx)

        seconds, first = _timed(relay)
        first_marks = list(marks)
        marks.clear()
        again_seconds, again = _timed(relay)
        figures = {
            "seconds": seconds,
            "metrics": {host: outcome.metrics for host, outcome in first.hosts.items()},
            "phases": _phases(first_marks),
            "again_seconds": again_seconds,
            "again_metrics": {host: outcome.metrics for host, outcome in again.hosts.items()},
            "again_phases": _phases(list(marks)),
        }
    figures["maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(figures))


def _phases(marks: list[tuple[float, str, str]]) -> dict[str, float]:
    """Seconds per stage of the slowest host: from a stage's first report to the next stage's (or the last report).

    A report without a stage (the heartbeat that opens importing and verifying) belongs to the stage of the
    next report that names one.
    """
    slowest: dict[str, float] = {}
    for host in {host for _, host, _ in marks}:
        mine, following = [], ""
        for stamp, name, stage in reversed(marks):
            if name == host:
                following = stage or following
                mine.append((stamp, following))
        starts: dict[str, float] = {}
        for stamp, stage in sorted(mine):
            if stage:
                starts.setdefault(stage, stamp)
        ordered = sorted(starts.items(), key=lambda item: item[1])
        ends = [stamp for _, stamp in ordered[1:]] + [max(stamp for stamp, _ in mine)]
        for (stage, began), ended in zip(ordered, ends, strict=True):
            slowest[stage] = max(slowest.get(stage, 0.0), ended - began)
    return slowest


def _child_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("OTEL_", "SPARKRUN_"))}
    env.update(SPARKRUN_OTEL="0")
    return env


def _run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """This script in ``--child`` mode; its figures, or a RuntimeError with its stderr."""
    argv = [sys.executable, str(Path(__file__).resolve()), _CHILD, json.dumps(spec)]
    process = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_child_env(), text=True
    )
    try:
        stdout, stderr = process.communicate(timeout=_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    lines = stdout.strip().splitlines()
    if process.returncode != 0 or not lines:
        tail = "\n".join(stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"the {spec['mode']} child exited with code {process.returncode}:\n{tail}")
    figures: dict[str, Any] = json.loads(lines[-1])
    return figures


# -- the receivers' memory ------------------------------------------------------------------------------------


class _PeakSampler:
    """Samples, in a thread, the peak RSS (``VmHWM``) of the host users' agents and rsync processes.

    A process is told by its owner (``/proc/<pid>``'s uid, one ``stat``, so the sampling stays cheap) and
    its argv: ``python3 -I -S -c ...`` is the agent (its ``sh -c`` parent, whose text merely contains
    that, is not), ``rsync ...`` the rsync receiver. ``VmHWM`` only grows, so the last sample is the peak
    but for the final 0.1 s of a process's life.
    """

    def __init__(self, uids: set[int]) -> None:
        self._uids = uids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self.peaks: dict[str, dict[int, int]] = {"agent": {}, "rsync": {}}

    def __enter__(self) -> _PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(_SAMPLE_INTERVAL):
            self._sample()

    def _sample(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid not in self._uids:
                    continue
                argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
                kind = _kind(argv)
                if kind is None:
                    continue
                status = Path(entry.path, "status").read_text()
            except OSError:  # gone meanwhile
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    kib = int(line.split()[1])
                    pid = int(entry.name)
                    self.peaks[kind][pid] = max(self.peaks[kind].get(pid, 0), kib)


def _kind(argv: list[bytes]) -> str | None:
    if len(argv) >= 4 and argv[0].rsplit(b"/", 1)[-1] == b"python3" and argv[1:4] == [b"-I", b"-S", b"-c"]:
        return "agent"
    if argv and argv[0].rsplit(b"/", 1)[-1] == b"rsync":
        return "rsync"
    return None


# -- the rsync baseline ---------------------------------------------------------------------------------------


def _rsync_argv(transport: SshTransport, blobs: list[Path], destination: Path) -> list[str]:
    """rsync of ``blobs`` into ``destination`` on the transport's host, over the relay's ssh command line and master."""
    ssh = [
        "ssh",
        *transport._options(),
        "-o",
        "ControlMaster=no",
        "-o",
        f"ControlPath={transport._socket}",
    ]
    return ["rsync", "-a", "--whole-file", "-e", shlex.join(ssh), *map(str, blobs), f"{transport.host}:{destination}/"]


def _rsync_round(transports: list[SshTransport], homes: list[Path], blobs: list[Path]) -> float:
    """Both hosts at once, into empty directories; seconds until the last rsync ends."""
    for transport in transports:  # ssh would fall back to a connection of its own, silently
        check = ["ssh", "-o", f"ControlPath={transport._socket}", "-O", "check", transport.host]
        if subprocess.run(check, stdin=subprocess.DEVNULL, capture_output=True, timeout=10).returncode != 0:
            raise RuntimeError(f"the master connection of {transport.host} is gone; rsync would not share it")
    for home in homes:
        shutil.rmtree(home / RSYNC_DIR, ignore_errors=True)
    os.sync()
    argvs = [_rsync_argv(transport, blobs, home / RSYNC_DIR) for transport, home in zip(transports, homes, strict=True)]
    started = time.perf_counter()
    processes = [
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for argv in argvs
    ]
    try:
        failures = []
        for process in processes:
            _, stderr = process.communicate(timeout=_TIMEOUT)
            if process.returncode != 0:
                failures.append(f"code {process.returncode}: {stderr.decode(errors='replace').strip()}")
        seconds = time.perf_counter() - started
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    if failures:
        raise RuntimeError("rsync failed: " + "; ".join(failures))
    for home in homes:  # a real, whole copy, or the figure means nothing
        copied = {path.name: path.stat().st_size for path in (home / RSYNC_DIR).iterdir()}
        if copied != {blob.name: blob.stat().st_size for blob in blobs}:
            raise RuntimeError(f"rsync left {len(copied)} files in {home / RSYNC_DIR}, not the {len(blobs)} blobs")
    return seconds


# -- the relay ------------------------------------------------------------------------------------------------


def _relay_round(spec: dict[str, Any], homes: list[Path], image_bytes: int) -> dict[str, Any]:
    """A relay into empty stores, then a second one, in a child process; its figures, checked."""
    for home in homes:
        shutil.rmtree(home / STORE, ignore_errors=True)
    os.sync()
    figures = _run_child(spec)
    wire = {host: metrics["wire_bytes"] for host, metrics in figures["metrics"].items()}
    if any(sent != image_bytes for sent in wire.values()):
        raise RuntimeError(f"the first relay sent {wire} bytes, not the whole image ({image_bytes}) to each host")
    return figures


def _transports(sctx: SparkrunContext, names: list[str]) -> list[SshTransport]:
    executors = Executors(sctx.config)
    chosen = [executors.for_host(name) for name in names]
    return [executor.transport for executor in chosen if isinstance(executor, SshExecutor)]


@contextlib.contextmanager
def _cleanup(transports: list[SshTransport], homes: list[Path]) -> Iterator[None]:
    """Remove the stores and the rsync copies and close the master connections, whatever happens."""
    try:
        yield
    finally:
        for home in homes:
            shutil.rmtree(home / STORE, ignore_errors=True)
            shutil.rmtree(home / RSYNC_DIR, ignore_errors=True)
            for parent in (home / STORE).parents:  # the agent's folders above the store, once empty
                if parent == home:
                    break
                with contextlib.suppress(OSError):
                    parent.rmdir()
        for transport in transports:
            with contextlib.suppress(Exception):
                transport.close()


def _verdict(name: str, measured: str, met: bool) -> str:
    return f"target {name}: {measured}: {'met' if met else 'missed'}"


def main() -> int:
    if sys.argv[1:2] == [_CHILD]:
        _child(json.loads(sys.argv[2]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="image size in MiB (default 1024)")
    parser.add_argument("--layers", type=int, default=8, help="layers of the image (default 8)")
    parser.add_argument("--repeat", type=int, default=2, help="rounds of relay and rsync, alternated (default 2)")
    args = parser.parse_args()
    began = time.monotonic()
    ssh_hosts, build = _test_support()
    scratch = Path(tempfile.mkdtemp(prefix="sparkrun-bench-relay-"))
    try:
        layout = scratch / "layout"
        build_seconds, _ = _timed(
            lambda: build(layout, TAG, total_size=max(args.size_mib, 1) << 20, layer_count=max(args.layers, 1))
        )
        with ssh_hosts(HOSTS) as hosts:
            return _run(hosts, scratch, layout, build_seconds, max(args.repeat, 1), began)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(hosts: Any, scratch: Path, layout: Path, build_seconds: float, repeat: int, began: float) -> int:
    names = [host.name for host in hosts.hosts]
    homes = [host.home for host in hosts.hosts]
    image = read_image(layout, TAG)
    blobs = [blob_path(layout, blob.digest) for blob in image.blobs]
    image_bytes = image.total_size
    config = scratch / "config.yaml"
    config.write_text(yaml.safe_dump({"hosts": hosts.inventory()}), encoding="utf-8")
    state = scratch / "state"
    sctx = initialize(config_path=config, state_dir=state)
    transports = _transports(sctx, names)
    spec = {"config": str(config), "state": str(state), "source": f"oci:{layout}:{TAG}", "hosts": names}
    uids = {pwd.getpwnam(host.user).pw_uid for host in hosts.hosts}

    relays: list[dict[str, Any]] = []
    rsyncs: list[float] = []
    with _cleanup(transports, homes):
        for transport in transports:  # the master connections, up before any timing
            transport.ensure_ready()
            subprocess.run([*transport.argv()[:-1], "true"], stdin=subprocess.DEVNULL, capture_output=True, check=True)
        baseline = _run_child({**spec, "mode": "baseline"})
        with _PeakSampler(uids) as sampler:
            warm_relay = _relay_round({**spec, "mode": "relay"}, homes, image_bytes)
            warm_rsync = _rsync_round(transports, homes, blobs)
            for _ in range(repeat):
                relays.append(_relay_round({**spec, "mode": "relay"}, homes, image_bytes))
                rsyncs.append(_rsync_round(transports, homes, blobs))

    relay_s = statistics.median(r["seconds"] for r in relays)
    rsync_s = statistics.median(rsyncs)
    again_s = statistics.median(r["again_seconds"] for r in relays)
    again_wire = max(sum(m["wire_bytes"] for m in r["again_metrics"].values()) for r in relays)
    again_host = statistics.median(max(m["duration_seconds"] for m in r["again_metrics"].values()) for r in relays)
    transfer_rate = statistics.median(
        statistics.mean(m["bytes_per_second"] for m in r["metrics"].values()) for r in relays
    )
    phases = {stage: statistics.median(r["phases"].get(stage, 0.0) for r in relays) for stage in STAGES}
    again_phases = {stage: statistics.median(r["again_phases"].get(stage, 0.0) for r in relays) for stage in STAGES}
    sender = max(r["maxrss_kib"] for r in [warm_relay, *relays]) * 1024
    base_rss = baseline["maxrss_kib"] * 1024
    agents, rsync_peaks = sampler.peaks["agent"], sampler.peaks["rsync"]
    receiver = max(agents.values(), default=0) * 1024
    rsync_receiver = max(rsync_peaks.values(), default=0) * 1024
    ratio = rsync_s / relay_s  # throughputs: the same bytes, so the inverse ratio of the seconds

    def rate(seconds: float) -> str:
        return f"{image_bytes * HOSTS / seconds / MB:>8.1f}"

    print(
        f"Image relay of {image_bytes / MB:.1f} MB ({len(image.layers)} layers, {len(blobs)} blobs; built in "
        f"{build_seconds:.1f} s) to {HOSTS} loopback SSH hosts (an sshd each) sharing {os.cpu_count()} CPUs; "
        f"medians of {repeat} rounds"
    )
    print("relay and rsync share one ssh master connection per host; both write into empty directories")
    print(
        f"warm-up round, not in the medians: relay {warm_relay['seconds']:.3f} s, rsync {warm_rsync:.3f} s, "
        f"second relay {warm_relay['again_seconds']:.3f} s"
    )
    print(f"{'':<46} {'seconds':>8} {'MB/s':>8} {'ratio':>7}")
    print(f"{'relay, first copy (api.distribute, 2 hosts)':<46} {relay_s:>8.3f} {rate(relay_s)} {ratio:>6.2f}x")
    print(f"{'rsync -a --whole-file, same ssh, 2 at once':<46} {rsync_s:>8.3f} {rate(rsync_s)} {1:>6.2f}x")
    print("  relay phases, slowest host: " + ", ".join(f"{stage} {phases[stage]:.2f} s" for stage in STAGES))
    print(f"  relay transferring phase alone: {transfer_rate * HOSTS / MB:.1f} MB/s (2 hosts, from bytes_per_second)")
    rounds = ", ".join(f"{r['seconds']:.2f}/{s:.2f}" for r, s in zip(relays, rsyncs, strict=True))
    print(f"  each round, relay/rsync seconds: {rounds}")
    print(
        f"{'second relay (no force)':<46} {again_s:>8.3f}   wire bytes {again_wire} "
        f"(slowest host's own duration {again_host:.3f} s)"
    )
    print("  second relay phases, slowest host: " + ", ".join(f"{st} {again_phases[st]:.2f} s" for st in STAGES))
    print("peak RSS, MB")
    print(
        f"  sender (relay child process)   {sender / MB:>8.1f}   import + initialize only: {base_rss / MB:.1f}, "
        f"the relay's own: +{(sender - base_rss) / MB:.1f}"
    )
    print(
        f"  receivers (python3 agents)     {receiver / MB:>8.1f}   max of {len(agents)} agent processes; "
        f"rsync's processes there, for information: {rsync_receiver / MB:.1f}"
    )
    print(f"runtime {time.monotonic() - began:.1f} s")
    print(_verdict(f"relay throughput >= {THROUGHPUT_TARGET}x rsync", f"{ratio:.2f}x", ratio >= THROUGHPUT_TARGET))
    print(_verdict("second relay sends 0 blob bytes", f"{again_wire} bytes", again_wire == 0))
    print(_verdict(f"second relay < {SECOND_RELAY_TARGET:g} s", f"{again_s:.3f} s", again_s < SECOND_RELAY_TARGET))
    print(_verdict("sender peak RSS < 100 MB", f"{sender / MB:.1f} MB", sender < MEMORY_TARGET))
    print(_verdict("receiver peak RSS < 100 MB", f"{receiver / MB:.1f} MB", receiver < MEMORY_TARGET))
    return 0


if __name__ == "__main__":
    sys.exit(main())
