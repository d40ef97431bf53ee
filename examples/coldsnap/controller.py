"""An example ColdSnap controller that does real work on this machine, for sparkrun's tests and demos.

The real controller snapshots GPU inference servers; this one stands in for it with the example
workload (``examples/workloads/openai_server.py``) and follows the controller contract to the byte:
request on stdin, timing stream written live, receipt written atomically. Standard library only,
and deliberately independent of sparkrun: it is the other side of the wire.

Usage::

    python examples/coldsnap/controller.py [--state-dir DIR] [--misbehave MODE ...] \\
        OPERATION --request-json - [--prepare-only] --receipt-json PATH --timing-events PATH

Options before OPERATION belong to the example; everything from OPERATION on is the contract's
invocation. The state directory (``$XDG_STATE_HOME/coldsnap-example``, else
``~/.local/state/coldsnap-example``) records what runs, the servers' logs and staged capsules.

What each operation does (every unit must be on a loopback address, each with its port):

- ``capture``: starts each unit's command, waits for its port and readiness path, warms it up with
  one chat completion, writes the artifact at ``output.uri`` (manifest, 4 MiB of "weights" derived
  from the model id, one capsule per unit), and stops the servers. An existing output is refused.
- ``restore --prepare-only``: checks the hardware (executables, free ports), the manifest, the
  weights' digest, and stages the capsules in the state directory; prints the preparation object.
- ``restore``: stops what the workload runs, starts every unit from its capsule with
  ``--startup-delay 0`` appended -- the example server's argparse keeps the last occurrence, so the
  "snapshot" skips the simulated model loading -- measures port open, HTTP ready and the time to the
  first streamed token, and leaves the servers running detached, their pids recorded.
- ``sleep`` stops them (SIGTERM, SIGKILL after ``policy.stop_grace_seconds``, default 5);
  ``wake`` starts them again from the artifact; ``status`` reports what runs as span attributes.
- ``publish`` and ``publish-native`` are not supported: exit 2 and a failed receipt.

Exit codes: 0 succeeded, 1 failed, 2 invalid invocation or request (or unsupported operation),
128 + signal number when cancelled (143 for SIGTERM); see ``misbehaviour.py`` for ``--misbehave``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any, TextIO

from artifact import ArtifactError
from misbehaviour import Misbehaviour
from operations import run_operation
from request import OPERATIONS, Identity, identity, parse_request
from run_context import Cancellation, Cancelled, InjectedFailure, Run, Unsupported, describe
from timing_stream import TimingStream, now_ns
from wire import MAX_REQUEST_BYTES, RequestError, digest, parse_strict_json, rfc3339_ns, write_private_atomically
from workload_processes import StateDir, UnitError

REPLAY_SEMANTICS = {
    "capture": "conflict-on-existing-output",
    "publish": "content-idempotent",
    "publish-native": "content-idempotent",
    "restore": "reconcile-replace",
    "sleep": "convergent",
    "wake": "convergent",
    "status": "convergent",
}


class Invocation(argparse.Namespace):
    state_dir: Path | None
    misbehave: list[str]
    operation: str
    request_json: str
    prepare_only: bool
    receipt_json: str | None
    timing_events: str | None


def _parse_invocation(argv: list[str] | None) -> Invocation:
    example = argparse.ArgumentParser(
        prog="controller.py",
        description="Example ColdSnap controller for the example workload (see the module docstring).",
    )
    example.add_argument("--state-dir", type=Path, help="where the controller keeps its state")
    example.add_argument("--misbehave", action="append", default=[], metavar="MODE", help="break the contract")
    example.add_argument("operation", choices=OPERATIONS)
    example.add_argument("contract", nargs=argparse.REMAINDER, help="the contract's options")
    invocation = example.parse_args(argv, namespace=Invocation())
    contract = argparse.ArgumentParser(prog=f"controller.py {invocation.operation}")
    contract.add_argument("--request-json", required=True, metavar="-", help="'-': the request is on stdin")
    contract.add_argument("--prepare-only", action="store_true", help="restore only: prepare, start nothing")
    contract.add_argument("--receipt-json", metavar="PATH", help="where the receipt goes ('-': stdout)")
    contract.add_argument("--timing-events", metavar="PATH", help="new file for the timing stream ('-': stdout)")
    contract.parse_args(invocation.contract, namespace=invocation)
    if invocation.prepare_only and invocation.operation != "restore":
        contract.error("--prepare-only is for restore only")
    if invocation.timing_events is not None and invocation.receipt_json is None:
        contract.error("--timing-events needs --receipt-json")
    stdout_users = [name for name in ("receipt_json", "timing_events") if getattr(invocation, name) == "-"]
    if invocation.prepare_only:
        stdout_users.append("prepare_only")
    if len(stdout_users) > 1:
        options = " and ".join("--" + name.replace("_", "-") for name in stdout_users)
        contract.error(f"{options} cannot share stdout")
    return invocation


def _is_successful_receipt(path: Path) -> bool:
    try:
        receipt = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(receipt, dict) and receipt.get("state") == "succeeded"


def _check_paths(invocation: Invocation) -> None:
    """Refuse, before anything runs, what the contract forbids about the output paths."""
    if invocation.receipt_json not in (None, "-"):
        receipt = Path(invocation.receipt_json)
        if not receipt.parent.is_dir():
            raise RequestError(f"the receipt's directory does not exist (path={receipt})")
        if _is_successful_receipt(receipt):
            raise RequestError(f"a successful receipt is never replaced (path={receipt})")
    if invocation.timing_events not in (None, "-"):
        timing = Path(invocation.timing_events)
        if not timing.is_absolute():
            raise RequestError(f"--timing-events must be an absolute path (path={timing})")
        if timing.exists() or timing.is_symlink():
            raise RequestError(f"the timing file already exists; it must be new (path={timing})")


def _read_request(source: str) -> Any:
    if source == "-":
        data = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    else:
        with open(source, "rb") as handle:
            data = handle.read(MAX_REQUEST_BYTES + 1)
    if len(data) > MAX_REQUEST_BYTES:
        raise RequestError(f"the request is larger than {MAX_REQUEST_BYTES} bytes")
    return parse_strict_json(data)


def _open_timing(path: str | None) -> TextIO | None:
    if path is None:
        return None
    if path == "-":
        return sys.stdout
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    return os.fdopen(fd, "w", encoding="ascii", newline="\n")


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "coldsnap-example"


def _failure(exc: BaseException) -> tuple[dict[str, str], int]:
    """The receipt's error object and the exit code for what ended the run."""
    if isinstance(exc, Cancelled):
        return {"type": "cancelled", "message": describe(exc)}, 128 + exc.signum
    kinds: list[tuple[type[BaseException], str, int]] = [
        (RequestError, "invalid-request", 2),
        (Unsupported, "unsupported-operation", 2),
        (InjectedFailure, "injected-failure", 1),
        (ArtifactError, "artifact", 1),
        (UnitError, "workload", 1),
    ]
    for kind, name, code in kinds:
        if isinstance(exc, kind):
            return {"type": name, "message": describe(exc)}, code
    traceback.print_exception(exc, file=sys.stderr)
    return {"type": "internal", "message": f"{type(exc).__name__}: {exc}"}, 1


def _write_receipt(target: str | None, receipt: dict[str, Any], modes: Misbehaviour) -> None:
    if target is None or "missing-receipt" in modes:
        return
    if "invalid-receipt" in modes:
        data = b"this receipt is not JSON {\n"
    else:
        data = (json.dumps(modes.receipt(receipt), indent=2, sort_keys=True) + "\n").encode()
    if target == "-":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return
    path = Path(target)
    if _is_successful_receipt(path):
        raise RequestError(f"a successful receipt appeared meanwhile and is never replaced (path={path})")
    write_private_atomically(path, data)


def _execute(
    invocation: Invocation,
    raw: dict[str, Any],
    ident: Identity,
    modes: Misbehaviour,
    cancellation: Cancellation,
    sink: TextIO | None,
) -> int:
    started_unix, started_mono = time.time_ns(), now_ns()
    request_sha256 = digest(raw)
    stream = TimingStream(sink, ident.id, modes.stream_request_sha256(request_sha256))
    state_dir = invocation.state_dir or _default_state_dir()
    run = Run(ident, stream, StateDir(state_dir), modes, cancellation, invocation.prepare_only)
    attributes = {
        "operation": ident.operation,
        "phase": "prepare" if invocation.prepare_only else "execute",
        "snapshot_driver": ident.snapshot_driver,
        "units": ident.units,
        "workers": ident.workers,
    }
    error: dict[str, str] | None = None
    exit_code = 0
    try:
        with run.span("coldsnap.controller", attributes):
            run.request = parse_request(raw, ident)
            run_operation(run)
    except BaseException as exc:  # every ending, a cancel included, becomes a receipt
        error, exit_code = _failure(exc)
        print(f"error: {error['message']}", file=sys.stderr)
    state = "failed" if error else "succeeded"
    timing = stream.timing()
    elapsed = now_ns() - started_mono
    receipt: dict[str, Any] = {
        "format": 2,
        "kind": "coldsnap-operation-receipt",
        "operation_id": ident.id,
        "operation": ident.operation,
        "state": state,
        "request_sha256": request_sha256,
        "engine": ident.engine,
        "snapshot_driver": ident.snapshot_driver,
        "replay_semantics": "safe-repeat" if invocation.prepare_only else REPLAY_SEMANTICS[ident.operation],
        "started_at": rfc3339_ns(started_unix),
        "completed_at": rfc3339_ns(started_unix + elapsed),
        "duration_seconds": round(elapsed / 1e9, 9),
        "timing": timing,
        "result": run.result,
    }
    if error:
        receipt["error"] = error
    try:
        _write_receipt(invocation.receipt_json, receipt, modes)
    except (OSError, RequestError) as exc:
        print(f"error: cannot write the receipt: {exc}", file=sys.stderr)
        exit_code = exit_code or 1
    if run.preparation is not None and not error:
        sys.stdout.write(json.dumps(modes.preparation(run.preparation), sort_keys=True) + "\n")
        sys.stdout.flush()
    stream.finish(*modes.stream_completion(state, digest(timing)))
    return exit_code if modes.exit_code is None else modes.exit_code


def main(argv: list[str] | None = None) -> int:
    invocation = _parse_invocation(argv)
    cancellation = Cancellation()  # a SIGTERM from here on ends in a failed receipt, not a torn file
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, cancellation.handler)
    try:
        modes = Misbehaviour.parse(invocation.misbehave)
        if "ignore-term" in modes:
            for signum in (signal.SIGTERM, signal.SIGINT):
                signal.signal(signum, signal.SIG_IGN)
        _check_paths(invocation)
        raw = _read_request(invocation.request_json)
        ident = identity(raw, invocation.operation)
        sink = _open_timing(invocation.timing_events)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        return _execute(invocation, raw, ident, modes, cancellation, sink)
    finally:
        if sink is not None and sink is not sys.stdout:
            sink.close()


if __name__ == "__main__":
    sys.exit(main())
