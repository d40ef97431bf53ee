"""The isolated worker process that runs one daemon job.

Run as ``python -m sparkrun.daemon.worker``. The daemon writes the job on
the first line of stdin and prompt answers on later lines; the worker
writes JSON messages (``event``, ``prompt``, ``result``, ``error``) to its
original stdout, which it keeps for itself: anything else the job prints
goes to stderr, the worker's log. Logging runs at PROGRESS, and plain
threads started without context are bound to the job, so legacy plugin
logging reaches the journal as ``log`` events. The daemon cancels a job with
SIGTERM, which the job sees as ``OperationCancelled``. A secret answer is redacted
from every later event and log line before it leaves the process.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
import uuid
from typing import IO, Any

from sparkrun.core import strict_json
from sparkrun.core.redaction import Redactor
from sparkrun.daemon.operations import Prompter, find_operation, load_plugins

__all__ = ["MAX_ERROR_CHARS", "MAX_RESULT_BYTES", "main"]

#: A job's result travels and is stored whole; larger ones fail the job with this limit named.
MAX_RESULT_BYTES = 4 * 2**20
#: Error messages are cut to this many characters (they appear in every job listing).
MAX_ERROR_CHARS = 4096


class _RedactingFormatter(logging.Formatter):
    """Formats a record, traceback included, then removes every secret from the whole text."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self._redactor = redactor

    def format(self, record: logging.LogRecord) -> str:
        return self._redactor.text(super().format(record))


class _Channel:
    """JSON lines to the daemon; one writer at a time."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> None:
        self.send_line(json.dumps({"kind": kind, **fields}, default=str))

    def send_line(self, line: str) -> None:
        with self._lock:
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except BrokenPipeError:
                os._exit(3)  # the daemon is gone; nobody can receive the job's outcome


class _WorkerPrompter(Prompter):
    def __init__(self, channel: _Channel, answers: IO[str], redactor: Redactor) -> None:
        self._channel, self._answers, self._redactor = channel, answers, redactor

    def _ask(self, kind: str, question: str, choices: list[str] | None = None) -> Any:
        prompt_id = uuid.uuid4().hex[:12]
        shown = self._redactor.value({"question": question, "choices": choices})
        self._channel.send("prompt", prompt={"prompt_id": prompt_id, "kind": kind, **shown})
        line = self._answers.readline()
        if not line:
            raise RuntimeError("the daemon closed the prompt channel")
        answer = json.loads(line)["answer"]
        if answer.get("prompt_id") != prompt_id:
            raise RuntimeError(f"answer for another prompt ({answer.get('prompt_id')!r})")
        return answer["value"]

    def confirm(self, question: str) -> bool:
        return bool(self._ask("confirm", question))

    def choice(self, question: str, choices: list[str]) -> str:
        return str(self._ask("choice", question, list(choices)))

    def secret(self, question: str) -> str:
        value = str(self._ask("secret", question))
        self._redactor.add(value)
        return value


def _configure_logging(redactor: Redactor) -> None:
    from sparkrun.core.log_bridge import PROGRESS

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_RedactingFormatter(redactor))
    logging.basicConfig(level=PROGRESS, handlers=[handler], force=True)


def _start_telemetry(state_dir: Any) -> Any:
    from sparkrun.config import env_flag

    if not env_flag(os.environ.get("SPARKRUN_OTEL"), default=True):
        return None
    try:
        import otel

        telemetry = otel.configure(state_dir=state_dir)
        otel.SparkrunInstrumentor().instrument(
            tracer_provider=telemetry.tracer_provider,
            meter_provider=telemetry.meter_provider,
            event_limit=telemetry.event_limit,
        )
    except Exception as error:  # telemetry never breaks the job it would observe
        logging.getLogger(__name__).warning("telemetry is off for this job: %s", error)
        return None
    return telemetry


def _result_line(result: Any, redactor: Redactor, timing: dict[str, float] | None) -> str:
    """The ``result`` message as strict JSON within the size limit, else an ``error`` message saying why."""
    try:
        plain = json.loads(json.dumps(result, default=str))
        safe = strict_json.made_safe(redactor.value(plain), "result")
        line = strict_json.dumps({"kind": "result", "result": safe, "operation": timing})
    except (ValueError, TypeError, RecursionError) as error:
        return _error_line("ResultError", f"the job's result is not strict JSON: {error}", redactor, timing)
    if len(line) > MAX_RESULT_BYTES:
        message = f"the job's result is too large (bytes={len(line)}, limit={MAX_RESULT_BYTES})"
        return _error_line("ResultTooLarge", message, redactor, timing)
    return line


def _error_line(type_name: str, message: str, redactor: Redactor, timing: dict[str, float] | None = None) -> str:
    text = redactor.text(message)
    if len(text) > MAX_ERROR_CHARS:
        text = text[: MAX_ERROR_CHARS - 1] + "…"
    error = strict_json.made_safe({"type": redactor.text(type_name), "message": text})
    return strict_json.dumps({"kind": "error", "error": error, "operation": timing})


def _timing(operation: Any) -> dict[str, float] | None:
    """When the job's operation began and ended (its root span), for a later replay of its trace."""
    if operation is None or operation.info.finished_at is None:
        return None
    return {"started_at": operation.info.started_at, "finished_at": operation.info.finished_at}


def _describe(error: BaseException) -> tuple[str, str]:
    try:
        message = str(error)
    except Exception:
        message = ""
    return type(error).__name__, message or type(error).__name__


def run_job(spec: dict[str, Any], channel: _Channel, answers: IO[str]) -> None:
    """Run the job described by ``spec`` and report its outcome on ``channel``."""
    from sparkrun.application import initialize
    from sparkrun.core.operation import bind_process_default, operation_scope

    redactor = Redactor()
    _configure_logging(redactor)
    telemetry = operation = None
    try:
        load_plugins(spec.get("plugins") or [])
        operation_def = find_operation(spec["operation"])
        sctx = initialize(state_dir=spec["state_dir"], events=lambda event: channel.send("event", event=event))
        telemetry = _start_telemetry(sctx.config.state_dir)
        scope = operation_scope(sctx, name=spec["operation"], operation_id=spec["operation_id"], processors=(redactor,))
        with scope as operation:
            bind_process_default(operation)
            result = operation_def.run(sctx, spec.get("arguments") or {}, _WorkerPrompter(channel, answers, redactor))
        channel.send_line(_result_line(result, redactor, _timing(operation)))
    except BaseException as error:  # the job's failure is its outcome, reported, not raised further
        channel.send_line(_error_line(*_describe(error), redactor, _timing(operation)))
    finally:
        bind_process_default(None)
        if telemetry is not None:
            telemetry.shutdown()


def _cancelled_by_daemon(signum: int, frame: Any) -> None:
    """SIGTERM is the daemon cancelling the job: unwind it like any cancel, so what it started is cleaned up."""
    from sparkrun.errors import OperationCancelled

    raise OperationCancelled("cancelled by the daemon")


def main() -> None:
    signal.signal(signal.SIGTERM, _cancelled_by_daemon)
    channel = _Channel(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    os.dup2(2, 1)  # the job's own prints (and its children's) go to the worker log
    sys.stdout = sys.stderr
    spec = json.loads(sys.stdin.readline())
    run_job(spec, channel, sys.stdin)


if __name__ == "__main__":
    main()
