"""The isolated worker process that runs one daemon job.

Run as ``python -m sparkrun.daemon.worker``. The daemon writes the job on
the first line of stdin and prompt answers on later lines; the worker
writes JSON messages (``event``, ``prompt``, ``result``, ``error``) to its
original stdout, which it keeps for itself: anything else the job prints
goes to stderr, the worker's log. Logging runs at PROGRESS, and plain
threads started without context are bound to the job, so legacy plugin
logging reaches the journal as ``log`` events. A secret answer is redacted
from every later event and log line before it leaves the process.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import uuid
from typing import IO, Any

from sparkrun.daemon.operations import Prompter, find_operation, load_plugins

__all__ = ["Redactor", "main"]

REDACTED = "[redacted]"


class Redactor:
    """Replaces every secret answer given to this job, wherever it appears."""

    def __init__(self) -> None:
        self._secrets: list[str] = []

    def add(self, secret: str) -> None:
        if secret and secret not in self._secrets:
            self._secrets.append(secret)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            value = value.replace(secret, REDACTED)
        return value

    def value(self, value: Any) -> Any:
        """``value`` with every secret replaced, looking inside dicts and lists (as is without secrets)."""
        if not self._secrets:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(key) if isinstance(key, str) else key: self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value


class _RedactingFilter(logging.Filter):
    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self._redactor.text(record.getMessage()), None
        return True


class _Channel:
    """JSON lines to the daemon; one writer at a time."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def send(self, kind: str, **fields: Any) -> None:
        line = json.dumps({"kind": kind, **fields}, default=str)
        with self._lock:
            try:
                self._stream.write(line + "\n")
                self._stream.flush()
            except BrokenPipeError:
                os._exit(3)  # the daemon is gone; nobody can receive the job's outcome


class _WorkerPrompter(Prompter):
    def __init__(self, channel: _Channel, answers: IO[str], redactor: Redactor, operation: Any) -> None:
        self._channel, self._answers, self._redactor, self._operation = channel, answers, redactor, operation

    def _ask(self, kind: str, question: str, choices: list[str] | None = None) -> Any:
        prompt_id = uuid.uuid4().hex[:12]
        self._channel.send(
            "prompt", prompt={"prompt_id": prompt_id, "kind": kind, "question": question, "choices": choices}
        )
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
        self._operation.redact = self._redactor.value
        return value


def _configure_logging(redactor: Redactor) -> None:
    from sparkrun.core.log_bridge import PROGRESS

    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(_RedactingFilter(redactor))
    logging.basicConfig(level=PROGRESS, handlers=[handler], force=True)


def _start_telemetry(state_dir: Any) -> Any:
    from sparkrun.config import env_flag

    if not env_flag(os.environ.get("SPARKRUN_OTEL"), default=True):
        return None
    import otel

    telemetry = otel.configure(state_dir=state_dir)
    otel.SparkrunInstrumentor().instrument(
        tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    return telemetry


def run_job(spec: dict[str, Any], channel: _Channel, answers: IO[str]) -> None:
    """Run the job described by ``spec`` and report its outcome on ``channel``."""
    from sparkrun.application import initialize
    from sparkrun.core.operation import bind_process_default, operation_scope

    redactor = Redactor()
    _configure_logging(redactor)
    load_plugins(spec.get("plugins") or [])
    operation_def = find_operation(spec["operation"])
    sctx = initialize(state_dir=spec["state_dir"], events=lambda event: channel.send("event", event=event))
    telemetry = _start_telemetry(sctx.config.state_dir)
    try:
        with operation_scope(sctx, name=spec["operation"], operation_id=spec["operation_id"]) as operation:
            bind_process_default(operation)
            prompter = _WorkerPrompter(channel, answers, redactor, operation)
            result = operation_def.run(sctx, spec.get("arguments") or {}, prompter)
        channel.send("result", result=redactor.value(json.loads(json.dumps(result, default=str))))
    except BaseException as error:  # the job's failure is its outcome, reported, not raised further
        message = redactor.text(str(error)) or type(error).__name__
        channel.send("error", error={"type": type(error).__name__, "message": message})
    finally:
        bind_process_default(None)
        if telemetry is not None:
            telemetry.shutdown()


def main() -> None:
    channel = _Channel(os.fdopen(os.dup(1), "w", encoding="utf-8"))
    os.dup2(2, 1)  # the job's own prints (and its children's) go to the worker log
    sys.stdout = sys.stderr
    spec = json.loads(sys.stdin.readline())
    run_job(spec, channel, sys.stdin)


if __name__ == "__main__":
    main()
