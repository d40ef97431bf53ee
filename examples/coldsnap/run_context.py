"""One controller run: its spans, clocks, cancellation, the servers it started, and the misbehaviour hooks.

Cancellation is cooperative: the SIGTERM handler only sets a flag, and every wait checks it, so a
record or a receipt is never cut in half. Whatever goes wrong, ``abandon`` completes the spans still
open and stops the servers this run started, inside the controller span, before the receipt.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from misbehaviour import Misbehaviour
from request import Identity, Request
from timing_stream import Clock, Span, TimingStream, now_ns
from workload_processes import RunningUnit, StateDir, stop

__all__ = ["Cancellation", "Cancelled", "InjectedFailure", "Run", "Unsupported", "describe"]

CRASH_EXIT_CODE = 70


class Cancelled(Exception):
    """SIGTERM (or SIGINT) arrived; the run unwinds and cleans up."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"cancelled by signal {signum}")
        self.signum = signum


class Unsupported(Exception):
    """An operation the example controller does not implement."""


class InjectedFailure(RuntimeError):
    """The failure ``--misbehave fail-span`` asks for."""


class Cancellation:
    """Set by the signal handler, read by the run."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def handler(self, signum: int, _frame: object) -> None:
        if self.signum is None:
            self.signum = signum


def describe(exc: BaseException) -> str:
    if isinstance(exc, Cancelled):
        return "cancelled: the controller received SIGTERM and stopped what it had started"
    return str(exc) or type(exc).__name__


class Run:
    """What one invocation does and has done; operations get it as their only argument."""

    def __init__(
        self,
        identity: Identity,
        stream: TimingStream,
        state: StateDir,
        modes: Misbehaviour,
        cancellation: Cancellation,
        prepare_only: bool,
    ) -> None:
        self.identity = identity
        self.stream = stream
        self.state = state
        self.modes = modes
        self.cancellation = cancellation
        self.prepare_only = prepare_only
        self.controller_clock = stream.clock("controller")
        self._request: Request | None = None
        self._stack: list[Span] = []
        self._worker_clocks: dict[str, Clock] = {}
        #: Servers this run started and has not handed over; ``abandon`` stops them.
        self.started: list[RunningUnit] = []
        self._started_role = "workload"
        self._started_artifact: dict[str, str] | None = None
        self.result: dict[str, Any] = {}
        self.preparation: dict[str, Any] | None = None
        self._cleaning = False

    @property
    def request(self) -> Request:
        assert self._request is not None, "the request is read before any operation runs"
        return self._request

    @request.setter
    def request(self, request: Request) -> None:
        self._request = request

    @property
    def launches_units(self) -> bool:
        return self.identity.operation in ("capture", "wake") or (
            self.identity.operation == "restore" and not self.prepare_only
        )

    # -- cancellation -------------------------------------------------------------------------------

    def check_cancel(self) -> None:
        if self.cancellation.signum is not None and not self._cleaning:
            raise Cancelled(self.cancellation.signum)

    def cancelled(self) -> bool:
        return self.cancellation.signum is not None

    def wait(self, seconds: float) -> None:
        """Sleep, but wake for a cancel within 20 ms."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.check_cancel()
            time.sleep(min(0.02, left))
        self.check_cancel()

    # -- spans --------------------------------------------------------------------------------------

    @property
    def root(self) -> Span:
        """The ``coldsnap.controller`` span, which every other span hangs under."""
        return self._stack[0]

    @property
    def current(self) -> Span | None:
        return self._stack[-1] if self._stack else None

    @contextmanager
    def span(
        self,
        name: str,
        attributes: dict[str, Any] | None = None,
        *,
        clock: Clock | None = None,
        parent: Span | None = None,
    ) -> Iterator[Span]:
        """A span around a block; an exception leaving the block completes it with ``error``."""
        span = self.stream.start(name, clock or self.controller_clock, parent or self.current, attributes)
        self._stack.append(span)
        try:
            yield span
        except BaseException as exc:
            self.stream.complete(span, error=describe(exc))
            raise
        else:
            self.stream.complete(span)
        finally:
            self._stack.remove(span)

    def record(
        self,
        name: str,
        start_ns: int,
        attributes: dict[str, Any] | None = None,
        *,
        clock: Clock | None = None,
        error: str | None = None,
    ) -> None:
        """A span completed now, never announced: its attributes are results known only at its end."""
        self.stream.record(name, clock or self.controller_clock, self.current, start_ns, attributes, error)

    def worker_clock(self, unit: str, worker: str) -> Clock:
        """The worker's clock, declared (origin = now) the first time the run needs it."""
        if worker not in self._worker_clocks:
            self._worker_clocks[worker] = self.stream.clock(worker, unit=unit, worker=worker)
        return self._worker_clocks[worker]

    # -- servers ------------------------------------------------------------------------------------

    def stop_units(self, units: list[RunningUnit], reason: str) -> list[str]:
        """Span ``units.stop`` with one ``unit.stop`` per server, on its worker clock; returns the outcomes."""
        grace = self.request.stop_grace if self._request else 5.0
        outcomes = []
        with self.span("units.stop", {"units": len(units), "reason": reason}):
            for unit in units:
                clock = self.worker_clock(unit.unit, unit.worker)
                start = now_ns()
                outcome = stop(unit, grace)
                outcomes.append(outcome)
                attributes = {"host": unit.host, "port": unit.port, "pid": unit.pid, "outcome": outcome}
                error = f"{unit.unit} (pid {unit.pid}) survived SIGKILL" if outcome == "still-running" else None
                self.record("unit.stop", start, attributes, clock=clock, error=error)
        return outcomes

    def abandon(self, exc: BaseException) -> None:
        """The operation failed or was cancelled: complete stray spans, stop what this run started."""
        message = describe(exc)
        on_stack = {span.id for span in self._stack}
        for span in reversed(self.stream.open_spans):
            if span.id not in on_stack:
                self.stream.complete(span, error=message)
        self._cleaning = True
        if not self.started:
            return
        try:
            outcomes = self.stop_units(self.started, "cancelled" if isinstance(exc, Cancelled) else "failed")
            if "still-running" not in outcomes:
                self.remember([], "stopped", self._started_role, self._started_artifact)
        except Exception as cleanup_error:  # the original failure is what the receipt reports
            print(f"coldsnap-example: cleanup failed: {cleanup_error}", file=sys.stderr)
        self.started = []

    def remember(self, units: list[RunningUnit], state: str, role: str, artifact: dict[str, str] | None) -> None:
        """Write the workload's (or its capture's) record; a capture record without servers is removed."""
        self._started_role, self._started_artifact = role, artifact
        if role == "capture" and not units:
            self.state.remove(self.request.workload, role)
        else:
            self.state.write(self.request.workload, state, self.request.id, units, artifact, role)

    # -- misbehaviour -------------------------------------------------------------------------------

    def checkpoint(self, where: str) -> None:
        """``early``: after the operation's first stage; ``units-up``: once its servers answer."""
        hang = "hang" in self.modes or "ignore-term" in self.modes
        if where == "early":
            if "slow" in self.modes:
                with self.span("example.slow", {"seconds": 1.5}):
                    self.wait(1.5)
            if "fail-span" in self.modes:
                with self.span("example.injected_failure"):
                    raise InjectedFailure("injected failure (--misbehave fail-span)")
            if "crash-mid-stream" in self.modes:
                print("coldsnap-example: crashing mid-stream (--misbehave crash-mid-stream)", file=sys.stderr)
                sys.stderr.flush()
                os._exit(CRASH_EXIT_CODE)
        if hang and (where == "units-up") == self.launches_units:
            mode = "ignore-term" if "ignore-term" in self.modes else "hang"
            with self.span("example.hang", {"mode": mode}):
                while True:
                    self.wait(0.05)
