"""Daemon operations that exercise prompts, secrets, legacy threads and long jobs in tests.

Loaded by the daemon and its workers through ``daemon.plugins`` in the
configuration file (with this repository on PYTHONPATH).
"""

from __future__ import annotations

import logging
import threading
import time

from sparkrun.daemon.operations import DaemonOperation, Param, register_operation
from sparkrun.feedback import get_feedback


def _ask(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    feedback = get_feedback("test.ask", sctx=sctx)
    proceed = prompter.confirm("Proceed with the upload?")
    size = prompter.choice("Which size?", ["small", "large"])
    token = prompter.secret("Registry token?")
    feedback.progress(f"logging in with {token}", stage="login", metrics={"token": token, "size": size})
    logging.getLogger("test.ask.legacy").warning("legacy plugin echoes %s", token)
    print(f"stdout echoes {token}", flush=True)
    feedback.progress("done", status="succeeded")
    return {"proceed": proceed, "size": size, "token_length": len(token)}


def _legacy(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    def plugin_thread() -> None:  # started without context, like old plugins do
        logging.getLogger("test.legacy").log(25, "progress from a plain thread")
        logging.getLogger("test.legacy").warning("warning from a plain thread")

    thread = threading.Thread(target=plugin_thread)
    thread.start()
    thread.join()
    return {"ok": True}


def _sleep(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    feedback = get_feedback("test.sleep", sctx=sctx)
    seconds = float(arguments.get("seconds", 30))
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        feedback.progress("sleeping", current=round(time.monotonic() - started, 2), unit="seconds", log_message=False)
        time.sleep(0.05)
    return {"slept": seconds}


def _burst(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    feedback = get_feedback("test.burst", sctx=sctx)
    for index in range(int(arguments.get("count", 100))):
        feedback.progress("tick", current=index, log_message=False)
    return {"count": arguments.get("count", 100)}


def _fail(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    raise RuntimeError(arguments.get("message", "planned failure"))


register_operation(DaemonOperation("ask", _ask, {}, "Ask a confirm, a choice and a secret."))
register_operation(DaemonOperation("legacy", _legacy, {}, "Log from a context-free thread."))
register_operation(DaemonOperation("sleep", _sleep, {"seconds": Param(float)}, "Report for a while."))
register_operation(DaemonOperation("burst", _burst, {"count": Param(int)}, "Report many events quickly."))
register_operation(DaemonOperation("fail", _fail, {"message": Param(str)}, "Fail on purpose."))


def _relay(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    """A relay to two hosts with byte counters, a warning and one failing host (for dashboards)."""
    feedback = get_feedback("test.relay", sctx=sctx)
    feedback.progress("planning", stage="plan", status="running")
    feedback.warning("layer cache is 91% full", stage="plan")
    for host, fails in (("spark-1", False), ("spark-2", True)):
        receiver = feedback.child(host=host)
        for received in (1_048_576, 2_097_152, 3_145_728):
            receiver.progress(
                "receiving",
                stage="transfer",
                current=received,
                total=4_194_304,
                total_kind="upper_bound",
                unit="bytes",
                log_message=False,
            )
        if fails:
            receiver.error("checksum mismatch", stage="verify", status="failed", metrics={"error_type": "DigestError"})
        else:
            receiver.progress("verified", stage="verify", status="succeeded")
    feedback.progress("relayed", stage="relay", status="succeeded")
    return {"hosts": 2}


register_operation(DaemonOperation("relay", _relay, {}, "Relay to two hosts, one failing (for dashboards)."))


#: (source, host, outcome, wire bytes, reused bytes, bytes per second, reused-items metric) of ``image_relay``.
IMAGE_RELAY_TRANSFERS = (
    ("oci-relay", "spark-1", "succeeded", 3_145_728, 5_242_880, 2_097_152.0, ("reused_layers", 4)),
    ("oci-relay", "spark-2", "failed", 1_048_576, 2_097_152, 524_288.0, ("reused_layers", 1)),
    ("model-copy", "spark-1", "succeeded", 2_097_152, 1_048_576, 1_048_576.0, ("reused_files", 3)),
)


def _image_relay(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    """An image relay to two hosts (one fails verification) and a model copy, shaped as the real ones report."""
    for source, host, outcome, wire, reused, rate, (reused_name, reused_count) in IMAGE_RELAY_TRANSFERS:
        receiver = get_feedback(source, sctx=sctx).child(host=host)
        receiver.progress("checking the receiver", stage="checking", status="running", log_message=False)
        receiver.progress("discovering what it has", stage="discovering", log_message=False)
        for sent in (wire // 2, wire):
            receiver.progress(
                "transferring",
                stage="transferring",
                current=sent,
                total=wire + reused,
                total_kind="upper_bound",
                unit="bytes",
                metrics={"bytes_per_second": rate, reused_name: reused_count},
                log_message=False,
            )
        receiver.progress("importing", stage="importing", log_message=False)
        final = {
            "wire_bytes": wire,
            "reused_bytes": reused,
            reused_name: reused_count,
            "bytes_per_second": rate,
            "duration_seconds": wire / rate,
        }
        if outcome == "failed":
            receiver.error(
                "digest mismatch", stage="verifying", status="failed", metrics={**final, "error_type": "DigestError"}
            )
        else:
            receiver.progress("verified", stage="verifying", status="succeeded", metrics=final, log_message=False)
    return {"transfers": len(IMAGE_RELAY_TRANSFERS)}


register_operation(
    DaemonOperation("image_relay", _image_relay, {}, "Relay an image and copy a model, as the real ones report.")
)


# -- hostile jobs for the hardening tests ----------------------------------------------------


def _leak(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    """Tries every way a secret can leave a job: events, logs, prints, children, prompts, the outcome."""
    import os
    import subprocess
    import sys

    feedback = get_feedback("test.leak", sctx=sctx)
    secret = prompter.secret("Registry token?")
    prompter.confirm(f"Log in to the registry with token {secret}?")
    feedback.progress(f"logging in with {secret}", stage=f"login-{secret}", metrics={secret: secret, "n": 1})
    feedback.child(source=f"test.leak.{secret}", host=f"host-{secret}").progress(
        f"child sees {secret}", status="succeeded", current=1, total=1, total_kind="exact", unit=f"u{secret}"
    )
    logging.getLogger("test.leak.legacy").warning("legacy plugin echoes %s", secret)
    try:
        raise ValueError(f"inner failure mentions {secret}")
    except ValueError:
        logging.getLogger("test.leak.legacy").exception("caught an error while using %r", secret)
    half = len(secret) // 2
    sys.stdout.write(f"stdout echoes {secret[:half]}")  # the secret split across two writes
    sys.stdout.flush()
    time.sleep(0.3)
    sys.stdout.write(f"{secret[half:]} and goes on\n")
    sys.stdout.flush()
    print(f"stderr echoes {secret!r} and {secret}", file=sys.stderr, flush=True)
    subprocess.run(
        [sys.executable, "-c", "import os; print('child echoes', os.environ['LEAK'])"],
        env={**os.environ, "LEAK": secret},
        check=True,
    )
    if arguments.get("outcome") == "result":
        return {secret: [secret, {"nested": f"value {secret}"}], "note": f"done with {secret}"}
    try:
        raise ValueError(f"the registry refused {secret}")
    except ValueError as cause:
        raise RuntimeError(f"login failed with token {secret}") from cause


def _result(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    """Returns a result of a chosen shape: a NaN, a non-UTF-8 file name, or a size in bytes."""
    import os

    kind = arguments.get("kind")
    if kind == "nan":
        return {"score": float("nan")}
    if kind == "file_name":
        return {"file": os.fsdecode(b"model-\xff\xfe.bin")}
    return {"blob": "x" * int(arguments.get("size", 10))}


def _stderr_flood(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    """Writes a progress bar with carriage returns and no newline, then (optionally) waits."""
    import sys

    step = "\r" + "#" * 1023
    for _ in range(int(arguments.get("kib", 8192))):
        sys.stderr.write(step)
    sys.stderr.flush()
    time.sleep(float(arguments.get("then_sleep", 0)))
    return {"written_kib": arguments.get("kib", 8192)}


register_operation(DaemonOperation("leak", _leak, {"outcome": Param(str)}, "Try to leak a secret everywhere."))
register_operation(
    DaemonOperation("result", _result, {"kind": Param(str), "size": Param(int)}, "Return an awkward result.")
)
register_operation(
    DaemonOperation(
        "stderr_flood", _stderr_flood, {"kib": Param(int), "then_sleep": Param(float)}, "Endless-line stderr."
    )
)


def _legacy_events(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    """Emits the event types that predate the feedback envelope, as an older plugin would."""
    from sparkrun.core.legacy_events import benchmark_event, setup_event

    setup_event("Preparing the host", source="setup.host", step="drivers", status="running")
    benchmark_event("schedule_started", "bench_0123456789ab", "2 tasks scheduled", total_tasks=2, title="demo")
    benchmark_event("task_end", "bench_0123456789ab", "task 0 done", index=0, success=True, duration_s=0.5)
    get_feedback("test.legacy").progress("a feedback report between them", status="succeeded")
    return {"ok": True}


register_operation(DaemonOperation("legacy_events", _legacy_events, {}, "Emit benchmark and setup events."))


def _register_fake_benchmark_framework() -> None:
    """The example fake framework (examples/benchmarks/fake_framework.py), for benchmark jobs."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "examples" / "benchmarks" / "fake_framework.py"
    spec = importlib.util.spec_from_file_location("fake_framework", path)
    assert spec is not None and spec.loader is not None
    spec.loader.exec_module(importlib.util.module_from_spec(spec))  # registers itself when imported


_register_fake_benchmark_framework()


def _console_demo(sctx, arguments, prompter):  # type: ignore[no-untyped-def]
    """Two hosts with an exact and an upper-bound counter, a spinner, a warning and hostile text (for the console)."""
    import time

    feedback = get_feedback("test.console", sctx=sctx)
    spark1, spark2 = feedback.child(host="spark-1"), feedback.child(host="spark-2")
    waiting = feedback.child(source="test.console.wait")
    steps, interval = int(arguments.get("steps", 20)), float(arguments.get("interval", 0.1))
    feedback.progress("<img src=x onerror=alert(1)>", stage="start", status="running")
    feedback.warning("a host is slow", stage="start")
    secret_length = 0
    if arguments.get("ask"):
        secret_length = len(prompter.secret("Registry password?"))
    for step in range(1, steps + 1):
        spark1.progress("Loading shards", stage="load", current=step, total=steps, total_kind="exact", unit="shards")
        spark2.progress(
            "Receiving layers",
            stage="transfer",
            current=step * 1000,
            total=steps * 1500,
            total_kind="upper_bound",
            unit="bytes",
        )
        waiting.progress("Warming up", stage="warmup", current=step, unit="requests")
        time.sleep(interval)
    feedback.error("spark-2 needed a retry", stage="transfer")
    spark1.progress("Loaded", stage="load", status="succeeded")
    spark2.progress("Received", stage="transfer", status="succeeded")
    return {"steps": steps, "secret_length": secret_length}


register_operation(
    DaemonOperation(
        "console_demo",
        _console_demo,
        {"steps": Param(int), "interval": Param(float), "ask": Param(bool)},
        "Report counters of every kind on two hosts (for the console).",
    )
)
