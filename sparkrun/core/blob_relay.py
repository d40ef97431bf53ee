"""Relaying content-addressed blobs to one host's store, with the receiver's phases as stages.

Shared by the image relay and the model copy: both send the blobs a host
lacks to its store (:mod:`sparkrun.core.executors.remote_store`), then let a
plugin's receiver action import them, then hash everything again on the
host. The stages are stable ids: ``checking``, ``discovering``,
``transferring``, ``importing``, ``verifying``. Byte counters are upper
bounds (the host may already hold some blobs), throttled per host while
stage changes go out at once, and only the final ``verifying`` report says
whether the host has the content: a byte count that reached its total
proves nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkrun.core.distribution import DistributionRequest, DistributionResult, HostOutcome
from sparkrun.core.executors import Executors
from sparkrun.core.executors.agent_transport import AgentTransport
from sparkrun.errors import ConfigError, HostError
from sparkrun.feedback import FeedbackReporter

__all__ = ["Blob", "HostRelay", "Receiver", "relay_to_host", "relay_to_hosts"]

_CHUNK = 1024 * 1024
STORE_MODULE = "sparkrun.core.executors.remote_store"


@dataclass(frozen=True)
class Blob:
    """One blob to relay: its digest and size, and the local file it is read from."""

    digest: str
    size: int
    path: Path

    def to_json(self) -> dict[str, Any]:
        return {"digest": self.digest, "size": self.size}


@dataclass
class HostRelay:
    """What one host ended with: the outcome, why it failed, what it now has, and the figures."""

    host: str
    outcome: str = "failed"
    error: str | None = None
    present: list[str] = field(default_factory=list)
    metrics: dict[str, int | float | str] = field(default_factory=dict)


class Receiver(Protocol):
    """What differs between an image and a model on the receiving host."""

    store: str
    #: Agent extension modules the import action needs (the store's module is always sent).
    extensions: tuple[str, ...]
    #: ``reused_layers`` or ``reused_files``.
    reuse_metric: str

    def import_request(self, reused: set[str]) -> dict[str, Any]: ...

    def present(self, imported: Mapping[str, Any]) -> list[str]: ...


class _Failed(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


def relay_to_hosts(
    request: DistributionRequest, source: str, kind: str, blobs: list[Blob], receiver: Receiver
) -> DistributionResult:
    """Every target host at once, each its own activity of ``source``; one outcome per host."""
    executors = Executors(request.config)
    feedback = request.feedback.child(source=source)

    def one(host: str) -> HostOutcome:
        reporter = feedback.child(host=host)
        try:
            transport = executors.transport_for(host)
        except (HostError, ConfigError) as error:
            reporter.error(str(error), stage="checking", status="failed")
            return HostOutcome(host, "failed", str(error))
        relayed = relay_to_host(transport, reporter, blobs, receiver, force=request.force)
        return HostOutcome(host, relayed.outcome, relayed.error, relayed.present, relayed.metrics)

    outcomes = executors.fan_out(one, request.hosts)
    return DistributionResult(
        source,
        kind,
        request.source,
        {
            host: outcome if isinstance(outcome, HostOutcome) else HostOutcome(host, "failed", str(outcome))
            for host, outcome in zip(request.hosts, outcomes, strict=True)
        },
    )


def relay_to_host(
    transport: AgentTransport,
    reporter: FeedbackReporter,
    blobs: list[Blob],
    receiver: Receiver,
    *,
    force: bool = False,
    interval: float = 0.5,
) -> HostRelay:
    """Run the five phases for one host; a failure ends that host only, reported and returned."""
    result = HostRelay(transport.host)
    run = _Run(transport, reporter, blobs, receiver, result, interval)
    try:
        run.all(force)
    except (_Failed, HostError) as error:
        stage = error.stage if isinstance(error, _Failed) else run.stage
        result.error = str(error)
        reporter.error(result.error, stage=stage, status="failed", metrics=run.figures())
    return result


class _Run:
    def __init__(
        self,
        transport: AgentTransport,
        reporter: FeedbackReporter,
        blobs: list[Blob],
        receiver: Receiver,
        result: HostRelay,
        interval: float,
    ) -> None:
        self.transport, self.reporter, self.blobs, self.receiver = transport, reporter, blobs, receiver
        self.result, self.interval = result, interval
        self.extensions = (STORE_MODULE, *receiver.extensions)
        self.stage = "checking"
        self.started = time.monotonic()
        self.upper = sum(blob.size for blob in blobs)
        self.sent = 0
        self.reused: list[Blob] = []
        self.transfer_seconds = 0.0
        self.force = False

    def _call(self, request: dict[str, Any], timeout: float = 600.0) -> Any:
        return self.transport.call(request, timeout=timeout, extensions=self.extensions)

    def figures(self) -> dict[str, int | float | str]:
        rate = self.sent / self.transfer_seconds if self.transfer_seconds > 0 else 0.0
        return {
            "wire_bytes": self.sent,
            self.receiver.reuse_metric: len(self.reused),
            "reused_bytes": sum(blob.size for blob in self.reused),
            "bytes_per_second": round(rate, 1),
            "duration_seconds": round(time.monotonic() - self.started, 3),
        }

    def all(self, force: bool) -> None:
        self.force = force
        host = self.transport.host
        self.reporter.progress(f"Checking {host}", stage="checking", status="running")
        listing = [blob.to_json() for blob in self.blobs]
        have = self._call({"action": "store.have", "store": self.receiver.store, "blobs": listing}, timeout=60)
        self.stage = "discovering"
        present = set() if force else set(have["present"])
        self.reused = [blob for blob in self.blobs if blob.digest in present]
        missing = [blob for blob in self.blobs if blob.digest not in present]
        needed = sum(blob.size for blob in missing)
        self._bytes(
            f"{host} has {len(self.reused)} of {len(self.blobs)} blobs; {needed} bytes to send",
            "discovering",
            {self.receiver.reuse_metric: len(self.reused), "reused_bytes": self.upper - needed},
        )
        if needed > have["free_bytes"]:
            raise _Failed(
                "discovering", f"{host} has not enough space (needs {needed} bytes, free {have['free_bytes']} bytes)"
            )
        self.stage = "transferring"
        self._transfer(missing)
        self.stage = "importing"
        with self.reporter.heartbeat(f"Importing on {host}", interval=5.0, stage="importing"):
            imported = self._call(self.receiver.import_request({blob.digest for blob in self.reused}))
        self.reporter.progress(
            f"Imported on {host}", stage="importing", metrics={k: v for k, v in imported.items() if _scalar(v)}
        )
        self.stage = "verifying"
        failures = self._verify()
        figures = self.figures()
        if failures:
            named = "; ".join(f"{failure['digest']}: {failure['reason']}" for failure in failures[:5])
            raise _Failed("verifying", f"{host} failed verification of {len(failures)} blob(s): {named}")
        self.result.outcome, self.result.metrics = "succeeded", figures
        self.result.present = self.receiver.present(imported)
        self.reporter.progress(
            f"Verified {len(self.blobs)} blobs on {host}", stage="verifying", status="succeeded", metrics=figures
        )

    def _bytes(self, message: str, stage: str, metrics: dict[str, int | float]) -> None:
        """A byte counter: what was sent so far, of an upper bound (the host may hold part of it)."""
        self.reporter.progress(
            message,
            stage=stage,
            current=self.sent,
            total=self.upper,
            total_kind="upper_bound",
            unit="bytes",
            metrics=metrics,
        )

    def _transfer(self, missing: list[Blob]) -> None:
        host, corrupt = self.transport.host, []
        self._bytes(
            f"Sending {len(missing)} blobs to {host}", "transferring", {self.receiver.reuse_metric: len(self.reused)}
        )
        began = time.monotonic()
        last = [began]

        def report(now: float) -> None:
            rate = round(self.sent / max(now - began, 1e-9), 1)
            self._bytes(
                f"Sending to {host}",
                "transferring",
                {"bytes_per_second": rate, self.receiver.reuse_metric: len(self.reused)},
            )
            last[0] = now

        def chunks() -> Iterator[bytes]:
            for blob in missing:
                yield (f'{{"digest": "{blob.digest}", "size": {blob.size}}}\n').encode()
                remaining = blob.size
                with open(blob.path, "rb") as source:
                    while remaining:
                        chunk = source.read(min(_CHUNK, remaining))
                        if not chunk:  # the source changed since it was described: cut the stream, never pad it
                            raise _Failed("transferring", f"source of {blob.digest} ended {remaining} bytes early")
                        remaining -= len(chunk)
                        yield chunk
                        self.sent += len(chunk)
                        now = time.monotonic()
                        if now - last[0] >= self.interval:
                            report(now)
            yield b'{"end": true}\n'

        def on_message(message: dict[str, Any]) -> None:
            if message.get("event") == "corrupt":
                corrupt.append(message)

        if missing:
            self.transport.upload(
                {"action": "store.receive", "store": self.receiver.store},
                chunks(),
                on_message,
                extensions=self.extensions,
            )
        self.transfer_seconds = time.monotonic() - began
        report(time.monotonic())
        if corrupt:
            named = "; ".join(f"{item['digest']} arrived as {item['found']}" for item in corrupt[:5])
            raise _Failed("transferring", f"{len(corrupt)} blob(s) arrived corrupted on {host}: {named}")

    def _verify(self) -> list[dict[str, str]]:
        total = len(self.blobs)
        request = {
            "action": "store.verify",
            "store": self.receiver.store,
            "blobs": [blob.to_json() for blob in self.blobs],
            "full": self.force,
        }
        result: dict[str, Any] = {}
        with self.reporter.heartbeat(f"Verifying on {self.transport.host}", interval=5.0, stage="verifying"):
            last = 0.0
            for message in self.transport.stream(request, extensions=self.extensions):
                if "result" in message:
                    result = message["result"]
                elif message.get("event") == "verified" and time.monotonic() - last >= self.interval:
                    last = time.monotonic()
                    self.reporter.progress(
                        f"Verifying on {self.transport.host}",
                        stage="verifying",
                        current=int(message["index"]),
                        total=total,
                        total_kind="exact",
                        unit="blobs",
                    )
        return list(result.get("failures", []))


def _scalar(value: object) -> bool:
    return isinstance(value, (str, int, float))
