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
