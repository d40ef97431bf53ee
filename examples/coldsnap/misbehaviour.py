"""Deliberate contract violations, so sparkrun's tests can see how it copes with a faulty controller.

Each ``--misbehave MODE`` breaks one promise and nothing else:

==========================  ================================================================
``wrong-digest``            stream_complete carries a timing_sha256 that is not the receipt's
``wrong-request-digest``    every stream record carries the same, wrong, request_sha256
``state-mismatch``          stream_complete says the opposite state of the receipt
``missing-receipt``         no receipt file is written
``invalid-receipt``         the receipt file is not JSON
``receipt-field:NAME=JSON`` the receipt's field NAME (dots reach inside) is set to JSON
``exit:N``                  the exit code is N whatever happened
``crash-mid-stream``        after the first stage: exit 70, no receipt, no stream_complete
``hang``                    waits (in span ``example.hang``) until SIGTERM, then cleans up as on cancel
``ignore-term``             like hang, but SIGTERM and SIGINT are ignored: only SIGKILL ends it
``fail-span``               span ``example.injected_failure`` fails; failed receipt; exit 1
``slow``                    span ``example.slow`` lasts about 1.5 s
``bad-preparation:FIELD``   prepare-only prints a preparation whose FIELD (dots reach inside) is wrong
==========================  ================================================================

Where: ``crash-mid-stream``, ``fail-span`` and ``slow`` act right after the operation's first stage,
before it starts any server; ``hang`` and ``ignore-term`` wait once the servers answer (capture,
restore, wake) or after the first stage (the other operations).
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Misbehaviour"]

WRONG_REQUEST_SHA256 = "sha256:" + "0" * 64
WRONG_TIMING_SHA256 = "sha256:" + "f" * 64
_FLAGS = (
    "wrong-digest",
    "wrong-request-digest",
    "state-mismatch",
    "missing-receipt",
    "invalid-receipt",
    "crash-mid-stream",
    "hang",
    "ignore-term",
    "fail-span",
    "slow",
)
_PREFIXED = ("receipt-field:", "exit:", "bad-preparation:")


def _set_path(target: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        child = target.get(key)
        if not isinstance(child, dict):
            child = target[key] = {}
        target = child
    target[last] = value


@dataclass
class Misbehaviour:
    flags: set[str] = field(default_factory=set)
    receipt_fields: list[tuple[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    bad_preparation: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, modes: list[str]) -> Misbehaviour:
        """Read the ``--misbehave`` values; an unknown or malformed mode is a ValueError."""
        result = cls()
        for mode in modes:
            if mode in _FLAGS:
                result.flags.add(mode)
            elif mode.startswith("receipt-field:"):
                name, sep, value = mode.removeprefix("receipt-field:").partition("=")
                if not sep or not name:
                    raise ValueError(f"--misbehave {mode}: write receipt-field:NAME=JSON")
                try:
                    result.receipt_fields.append((name, json.loads(value)))
                except ValueError:
                    raise ValueError(f'--misbehave {mode}: {value!r} is not JSON (quote strings: NAME="x")') from None
            elif mode.startswith("exit:"):
                code = mode.removeprefix("exit:")
                if not code.isdigit() or int(code) > 255:
                    raise ValueError(f"--misbehave {mode}: N must be an exit code from 0 to 255")
                result.exit_code = int(code)
            elif mode.startswith("bad-preparation:") and mode != "bad-preparation:":
                result.bad_preparation.append(mode.removeprefix("bad-preparation:"))
            else:
                known = ", ".join([*_FLAGS, *(prefix + "..." for prefix in _PREFIXED)])
                raise ValueError(f"unknown --misbehave mode {mode!r}; known: {known}")
        return result

    def __contains__(self, flag: str) -> bool:
        return flag in self.flags

    def stream_request_sha256(self, real: str) -> str:
        return WRONG_REQUEST_SHA256 if "wrong-request-digest" in self else real

    def stream_completion(self, state: str, timing_sha256: str) -> tuple[str, str]:
        if "state-mismatch" in self:
            state = "failed" if state == "succeeded" else "succeeded"
        return state, WRONG_TIMING_SHA256 if "wrong-digest" in self else timing_sha256

    def receipt(self, receipt: dict[str, Any]) -> dict[str, Any]:
        changed = copy.deepcopy(receipt)
        for name, value in self.receipt_fields:
            _set_path(changed, name, value)
        return changed

    def preparation(self, preparation: dict[str, Any]) -> dict[str, Any]:
        changed = copy.deepcopy(preparation)
        for name in self.bad_preparation:
            if name == "snapshot_driver":
                changed[name] = {"id": "not-the-requested-driver"}
            else:
                _set_path(changed, name, f"not-the-requested-{name.replace('.', '-')}")
        return changed
