"""The example controller's operations, each one real work on this machine, each one span by span.

Every per-unit measurement sits on that unit's worker clock; controller steps sit on the controller
clock under ``coldsnap.controller``. Restore and wake start each unit from its staged capsule with
``--startup-delay 0`` appended: the example server takes the last occurrence of an option, so the
"snapshot" skips the simulated model loading, which is what a real snapshot saves.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

from artifact import (
    WARMUP_PROMPT,
    WEIGHTS_BYTES,
    Artifact,
    Capsule,
    check_output_free,
    load_manifest,
    new_output_dir,
    publish_output,
    read_capsule,
    stage_capsule,
    text_sha256,
    verify_weights,
    write_capsule,
    write_manifest,
    write_weights,
)
from request import Location, Unit, location
from run_context import Run, Unsupported
from timing_stream import Clock, Span, now_ns
from wire import RequestError
from workload_processes import RunningUnit, UnitError, chat, http_ok, port_free, port_open, spawn, stream_chat

__all__ = ["MUTATING", "OPERATIONS", "run_operation"]

#: What a restored unit gets appended to its captured command (argparse keeps the last occurrence).
SKIP_LOADING = ("--startup-delay", "0")
LOCK_TIMEOUT_SECONDS = 10.0
PORT_RELEASE_SECONDS = 2.0  # our own servers are gone by then; anything else will not leave
CAPTURE_NAMES = ("unit.port_open", "unit.http_ready")
RESTORE_NAMES = ("runtime.startup_port_open", "runtime.startup_http_ready")


@dataclass
class Launch:
    """A unit being brought up: its process, worker clock and the spans still waiting for it."""

    unit: Unit
    process: RunningUnit
    clock: Clock
    startup: Span
    port_span: Span
    http_span: Span
    port_open: bool = False


def _artifact_json(where: Location, artifact: Artifact | None = None) -> dict[str, str]:
    result = {"provider": where.provider, "uri": where.uri}
    if artifact is not None:
        result["manifest_sha256"] = artifact.manifest_sha256
    return result


# -- stages shared by several operations ------------------------------------------------------------


def _hardware(run: Run, for_capture: bool) -> None:
    """``coldsnap.hardware``: each unit's executable (its Python) exists; its port is free.

    Capture needs the ports free now. Prepare-only only reports a busy port (``port_state``): sparkrun
    evicts the old workload between prepare-only and the real restore, which then insists on them.
    """
    request = run.request
    held = {(unit.host, unit.port) for unit in run.state.recorded_units(request.workload) if unit.alive()}
    problems = []
    with run.span("coldsnap.hardware", {"units": len(request.units), "hosts": _hosts(request.units)}):
        for unit in request.units:
            clock = run.worker_clock(unit.id, unit.worker)
            start = now_ns()
            executable = shutil.which(unit.command[0])
            if port_free(unit.host, unit.port):
                port_state = "free"
            else:
                port_state = "held-by-workload" if (unit.host, unit.port) in held else "busy"
            error = None
            if executable is None:
                error = f"{unit.id}: {unit.command[0]!r} is not an executable on this machine"
            elif for_capture and port_state != "free":
                whom = f"workload {request.workload}; sleep it first" if port_state != "busy" else "another process"
                error = f"{unit.id}: {unit.host}:{unit.port} is in use by {whom}"
            attributes = {"host": unit.host, "port": unit.port, "executable": executable or unit.command[0]}
            run.record("hardware.probe", start, {**attributes, "port_state": port_state}, clock=clock, error=error)
            if error:
                problems.append(error)
        if problems:
            raise UnitError("; ".join(problems))


def _hosts(units: tuple[Unit, ...] | list[Unit]) -> str:
    return ",".join(dict.fromkeys(unit.host for unit in units))


def _launch(run: Run, unit: Unit, command: list[str], remember: Callable[[], None], names: tuple[str, str]) -> Launch:
    clock = run.worker_clock(unit.id, unit.worker)
    run.check_cancel()
    start = now_ns()
    log = run.state.log_path(run.request.workload, unit.id)
    process = spawn(unit.id, unit.worker, unit.host, unit.port, command, unit.environment, log)
    run.started.append(process)
    remember()  # recorded before anything waits, so a killed controller leaves a trail to clean up
    address = {"host": unit.host, "port": unit.port}
    startup = run.stream.start("unit.startup", clock, run.root, {**address, "pid": process.pid}, start_ns=start)
    port_span = run.stream.start(names[0], clock, startup, address, start_ns=start)
    http_span = run.stream.start(names[1], clock, startup, {**address, "path": run.request.http_path}, start_ns=start)
    return Launch(unit, process, clock, startup, port_span, http_span)


def _launch_all(
    run: Run,
    commands: dict[str, list[str]],
    state: str,
    role: str,
    where: dict[str, str] | None,
    names: tuple[str, str],
) -> list[Launch]:
    """``coordinator.start`` brings up rank 0 first, then ``units.launch`` the others."""

    def remember() -> None:
        run.remember(run.started, state, role, where)

    first, *rest = run.request.units
    launches = []
    with run.span("coordinator.start", {"unit": first.id, "host": first.host, "port": first.port}):
        launches.append(_launch(run, first, commands[first.id], remember, names))
    if rest:
        with run.span("units.launch", {"units": len(rest), "hosts": _hosts(rest)}):
            launches.extend(_launch(run, unit, commands[unit.id], remember, names) for unit in rest)
    return launches


def _wait_ready(run: Run, launches: list[Launch]) -> None:
    """``units.ready``: poll every unit's port, then its readiness path, until all answer."""
    request = run.request
    attributes = {"units": len(launches), "http_path": request.http_path, "timeout_seconds": request.readiness_timeout}
    with run.span("units.ready", attributes):
        deadline = time.monotonic() + request.readiness_timeout
        pending = list(launches)
        while pending:
            for launch in list(pending):
                unit, process = launch.unit, launch.process
                code = process.exit_code()
                if code is not None:
                    raise UnitError(
                        f"{unit.id} on {unit.host}:{unit.port} exited with code {code} before it was ready "
                        f"(log {process.log}: {process.log_tail()})"
                    )
                if not launch.port_open and port_open(unit.host, unit.port):
                    run.stream.complete(launch.port_span)
                    launch.port_open = True
                if launch.port_open and http_ok(unit.host, unit.port, request.http_path, timeout=2.0):
                    run.stream.complete(launch.http_span)
                    pending.remove(launch)
            if pending and time.monotonic() > deadline:
                late = ", ".join(f"{launch.unit.id} on {launch.unit.host}:{launch.unit.port}" for launch in pending)
                raise UnitError(f"{late} not ready within {request.readiness_timeout:g} s")
            if pending:
                run.wait(0.01)


def _warm_up(run: Run, launches: list[Launch]) -> dict[str, str]:
    """Capture's ``units.warmup``: one real chat completion per unit; the answers' digests."""
    answers = {}
    with run.span("units.warmup", {"units": len(launches), "model": run.request.model_id}):
        for launch in launches:
            run.check_cancel()
            unit = launch.unit
            attributes = {"host": unit.host, "port": unit.port}
            with run.span("unit.warmup", attributes, clock=launch.clock, parent=launch.startup):
                answer = chat(unit.host, unit.port, run.request.model_id, WARMUP_PROMPT)
            answers[unit.id] = text_sha256(answer)
            run.stream.complete(launch.startup)
    return answers


def _first_answers(run: Run, launches: list[Launch], capsules: dict[str, Capsule]) -> None:
    """Restore's ``units.warmup``: a streamed chat per unit; ``runtime.startup_ttft`` ends at its first text."""
    with run.span("units.warmup", {"units": len(launches), "model": run.request.model_id, "stream": True}):
        for launch in launches:
            run.check_cancel()
            unit = launch.unit
            start = now_ns()
            address = {"host": unit.host, "port": unit.port}
            ttft = run.stream.start("runtime.startup_ttft", launch.clock, launch.startup, address)
            answer = stream_chat(
                unit.host, unit.port, run.request.model_id, WARMUP_PROMPT, lambda s=ttft: run.stream.complete(s)
            )
            digest = text_sha256(answer)
            matches = digest == capsules[unit.id].warmup_answer_sha256
            attributes = {**address, "answer_sha256": digest, "matches_capture": matches}
            run.stream.record("unit.answer", launch.clock, launch.startup, start, attributes)
            run.stream.complete(launch.startup)


def _read_state(run: Run) -> tuple[dict | None, list[RunningUnit], list[RunningUnit]]:
    """Complete-only span ``state.read``: the workload's record and any capture's."""
    workload = run.request.workload
    start = now_ns()
    try:
        record = run.state.read(workload)
        capturing = run.state.units(run.state.read(workload, "capture"))
    except UnitError as exc:
        run.record("state.read", start, {"workload": workload}, error=str(exc))
        raise
    units = run.state.units(record)
    state = str(record.get("state")) if record else "absent"
    attributes = {"workload": workload, "state": state, "units": len(units), "capturing": len(capturing)}
    run.record("state.read", start, attributes)
    return record, units, capturing


def _pull_capsules(run: Run, artifact: Artifact) -> dict[str, Capsule]:
    """``capsule.pull``: the capsules staged by prepare-only, or staged now from the artifact."""
    staged = run.state.staged_dir(run.request.workload, artifact.manifest_sha256)
    ready = all((staged / f"{unit['id']}.json").exists() for unit in artifact.units())
    with run.span("capsule.pull", {"source": "staged" if ready else "artifact", "dir": str(staged)}):
        return {
            unit["id"]: read_capsule(stage_capsule(artifact, unit, staged), unit["id"]) for unit in artifact.units()
        }


def _replace(run: Run, where: dict[str, str]) -> None:
    """``coldsnap.workload.replace``: stop what this workload runs, then wait for its ports."""
    request = run.request
    old = [unit for unit in run.state.recorded_units(request.workload) if unit.alive()]
    with run.span("coldsnap.workload.replace", {"workload": request.workload, "running": len(old)}):
        if old and "still-running" in run.stop_units(old, "replaced"):
            raise UnitError(f"a server of workload {request.workload} survived SIGKILL")
        run.remember([], "stopped", "capture", None)
        run.remember([], "stopped", "workload", where)
        deadline = time.monotonic() + PORT_RELEASE_SECONDS
        for unit in request.units:
            while not port_free(unit.host, unit.port):
                if time.monotonic() > deadline:
                    raise UnitError(f"{unit.id}: {unit.host}:{unit.port} is in use by another process")
                run.wait(0.05)


def _start_from_capsules(run: Run, artifact: Artifact, where: Location) -> None:
    capsules = _pull_capsules(run, artifact)
    recorded = _artifact_json(where)
    _replace(run, recorded)
    commands = {unit_id: [*capsule.command, *SKIP_LOADING] for unit_id, capsule in capsules.items()}
    launches = _launch_all(run, commands, "starting", "workload", recorded, RESTORE_NAMES)
    _wait_ready(run, launches)
    _first_answers(run, launches, capsules)
    run.checkpoint("units-up")
    with run.span("state.record", {"workload": run.request.workload, "state": "running", "units": len(launches)}):
        run.remember(run.started, "running", "workload", recorded)
    run.started = []  # handed over: they keep running after the controller exits
    run.result["artifact"] = _artifact_json(where, artifact)


def _status(run: Run, units: list[RunningUnit], state: str) -> bool:
    """``units.status`` with one complete-only ``unit.status`` per server; True if every one answers."""
    every = bool(units)
    with run.span("units.status", {"workload": run.request.workload, "state": state, "units": len(units)}):
        for unit in units:
            clock = run.worker_clock(unit.unit, unit.worker)
            start = now_ns()
            alive = unit.alive()
            answering = alive and http_ok(unit.host, unit.port, run.request.http_path)
            every = every and answering
            attributes = {"host": unit.host, "port": unit.port, "pid": unit.pid or "none"}
            run.record("unit.status", start, {**attributes, "alive": alive, "answering": answering}, clock=clock)
    return every


# -- the operations ---------------------------------------------------------------------------------


def capture(run: Run) -> None:
    request = run.request
    output = request.output
    assert output is not None
    with run.span("output.check", {"provider": output.provider, "uri": output.uri}):
        check_output_free(output.path)
    run.checkpoint("early")
    _hardware(run, for_capture=True)
    commands = {unit.id: list(unit.command) for unit in request.units}
    launches = _launch_all(run, commands, "capturing", "capture", None, CAPTURE_NAMES)
    _wait_ready(run, launches)
    answers = _warm_up(run, launches)
    run.checkpoint("units-up")
    with run.span("artifact.write", {"provider": output.provider, "uri": output.uri}):
        scratch = new_output_dir(output.path)
        try:
            with run.span("weights.write", {"bytes": WEIGHTS_BYTES}):
                weights = write_weights(scratch, request.model_id)
            entries = []
            with run.span("capsules.write", {"units": len(launches)}):
                for launch in launches:
                    run.check_cancel()
                    unit = launch.unit
                    described = {"id": unit.id, "index": unit.index, "host": unit.host, "port": unit.port}
                    described |= {"worker": unit.worker, "command": list(unit.command)}
                    capsule = write_capsule(
                        scratch,
                        {**described, "captured_from_pid": launch.process.pid},
                        request.model_id,
                        answers[unit.id],
                    )
                    entries.append({**described, "capsule": capsule, "warmup_answer_sha256": answers[unit.id]})
            with run.span("manifest.write"):
                manifest_sha256 = write_manifest(scratch, request, weights, entries)
            run.check_cancel()
            publish_output(scratch, output.path)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
    if "still-running" in run.stop_units(run.started, "captured"):
        raise UnitError("a captured server survived SIGKILL")
    run.started = []
    run.remember([], "stopped", "capture", None)
    run.result["output"] = {"provider": output.provider, "uri": output.uri, "manifest_sha256": manifest_sha256}


def _prepare(run: Run) -> None:
    """Restore's prepare-only: hardware, artifact, weights, capsules, each needing the one before."""
    request = run.request
    where = request.artifact
    assert where is not None
    _hardware(run, for_capture=False)
    run.checkpoint("early")
    with run.span("coldsnap.artifact", {"provider": where.provider, "uri": where.uri}):
        artifact = load_manifest(where.path, request)
    weights = artifact.manifest["weights"]
    with run.span("coldsnap.weights", {"bytes": weights.get("bytes"), "sha256": weights.get("sha256")}):
        verify_weights(artifact)
    staged = run.state.staged_dir(request.workload, artifact.manifest_sha256)
    with run.span("coldsnap.capsules", {"units": len(artifact.units()), "dir": str(staged)}):
        for entry in artifact.units():
            unit = request.unit(entry["id"])
            assert unit is not None  # load_manifest checked the layout
            attributes = {"host": unit.host, "sha256": entry["capsule"].get("sha256")}
            with run.span("capsule.stage", attributes, clock=run.worker_clock(unit.id, unit.worker)):
                stage_capsule(artifact, entry, staged)
    stages = ["coldsnap.hardware", "coldsnap.artifact", "coldsnap.weights", "coldsnap.capsules"]
    prepared = {"artifact": _artifact_json(where, artifact), "stages": stages, "staged_dir": str(staged)}
    run.result["prepared"] = prepared
    run.preparation = {
        "kind": "coldsnap-restore-preparation",
        "operation_id": request.id,
        "provider": where.provider,
        "snapshot_driver": {"id": request.identity.snapshot_driver},
        **prepared,
        "model": artifact.manifest["model"],
        "units": [{"id": unit.id, "host": unit.host, "port": unit.port} for unit in request.units],
    }


def restore(run: Run) -> None:
    if run.prepare_only:
        _prepare(run)
        return
    where = run.request.artifact
    assert where is not None
    with run.span("coldsnap.artifact", {"provider": where.provider, "uri": where.uri}):
        artifact = load_manifest(where.path, run.request)
    run.checkpoint("early")
    _start_from_capsules(run, artifact, where)


def sleep(run: Run) -> None:
    record, units, capturing = _read_state(run)
    run.checkpoint("early")
    running = [unit for unit in [*units, *capturing] if unit.alive()]
    if "still-running" in run.stop_units(running, "sleep"):
        raise UnitError(f"a server of workload {run.request.workload} survived SIGKILL")
    where = (record or {}).get("artifact")
    if run.request.artifact is not None:
        where = _artifact_json(run.request.artifact)
    asleep = [dataclasses.replace(unit, pid=None, start_time=None) for unit in units]
    with run.span("state.record", {"workload": run.request.workload, "state": "sleeping", "units": len(asleep)}):
        run.remember([], "stopped", "capture", None)
        run.remember(asleep, "sleeping", "workload", where)
    if where:
        run.result["artifact"] = where


def wake(run: Run) -> None:
    record, units, _capturing = _read_state(run)
    run.checkpoint("early")
    request = run.request
    recorded_running = bool(record) and record.get("state") == "running" and len(units) == len(request.units)
    if recorded_running and _status(run, units, "running"):  # convergent: already awake
        run.checkpoint("units-up")
        if isinstance(record.get("artifact"), dict):
            run.result["artifact"] = record["artifact"]
        return
    where = request.artifact or location((record or {}).get("artifact"), "recorded artifact")
    if where is None:
        raise RequestError(f"wake needs artifact.uri: workload {request.workload} has no recorded artifact")
    with run.span("coldsnap.artifact", {"provider": where.provider, "uri": where.uri}):
        artifact = load_manifest(where.path, request)
    _start_from_capsules(run, artifact, where)


def status(run: Run) -> None:
    record, units, capturing = _read_state(run)
    run.checkpoint("early")
    request = run.request
    known = [*units, *capturing] or [
        RunningUnit(unit.id, unit.worker, unit.host, unit.port, None, None, list(unit.command), "")
        for unit in request.units
    ]
    _status(run, known, str(record.get("state")) if record else "absent")
    if record and isinstance(record.get("artifact"), dict):
        run.result["artifact"] = record["artifact"]


def publish(run: Run) -> None:
    raise Unsupported(
        f"{run.identity.operation} is not supported by the example controller "
        "(it captures, restores, sleeps, wakes and reports status)"
    )


OPERATIONS: dict[str, Callable[[Run], None]] = {
    "capture": capture,
    "publish": publish,
    "publish-native": publish,
    "restore": restore,
    "sleep": sleep,
    "wake": wake,
    "status": status,
}
MUTATING = ("capture", "restore", "sleep", "wake")


def run_operation(run: Run) -> None:
    """Run the invoked operation under the workload's lock; on any failure, clean up what it started."""
    operation = OPERATIONS[run.identity.operation]
    mutating = run.identity.operation in MUTATING and not run.prepare_only
    lock = run.state.lock(run.request.workload, LOCK_TIMEOUT_SECONDS, run.cancelled) if mutating else nullcontext()
    with lock:
        try:
            run.check_cancel()
            operation(run)
        except BaseException as exc:
            run.abandon(exc)
            raise
