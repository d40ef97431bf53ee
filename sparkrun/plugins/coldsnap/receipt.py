"""Judging a controller run by its receipt: hard checks, soft warnings, startup measurements.

The receipt is authoritative, so what contradicts the request or the exit
code is a :class:`ReceiptError` (:func:`check_receipt`). The live timing
stream is only a view of the run while it happened; where it disagrees with
the receipt, or could not be read, sparkrun warns and carries on
(:func:`stream_warnings`). This module also re-exports the receipt format
(:mod:`.receipt_format`) and the prepare-only check (:mod:`.preparation`), so
callers find the receipt's whole surface in one place.

sparkrun's own choices: a ``replay_semantics`` other than the one the
contract gives for the operation is a warning, not an error (it describes
what a retry would do; the run itself is judged by the checks); when
sparkrun passes the digest it computed for the request, a receipt that
answers a different digest is a warning too. Startup measurements count
only spans that completed with status ``ok``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from sparkrun.plugins.coldsnap.canonical import sha256_digest
from sparkrun.plugins.coldsnap.fields import quote, request_value
from sparkrun.plugins.coldsnap.preparation import PREPARATION_KIND, PreparationError, check_preparation
from sparkrun.plugins.coldsnap.receipt_format import (
    MAX_RECEIPT_BYTES,
    RECEIPT_FORMAT,
    RECEIPT_KIND,
    Receipt,
    ReceiptError,
    parse_receipt,
    read_receipt,
)
from sparkrun.plugins.coldsnap.timing import TimingStream

__all__ = [
    "MAX_RECEIPT_BYTES",
    "PREPARATION_KIND",
    "PREPARE_ONLY_REPLAY",
    "RANK0_UNIT",
    "RECEIPT_FORMAT",
    "RECEIPT_KIND",
    "REPLAY_SEMANTICS",
    "STARTUP_MEASUREMENTS",
    "STARTUP_OBSERVATION",
    "PreparationError",
    "Receipt",
    "ReceiptError",
    "check_preparation",
    "check_receipt",
    "parse_receipt",
    "read_receipt",
    "startup_measurements",
    "stream_warnings",
]

#: What a retry of each operation does, as the contract states it.
REPLAY_SEMANTICS: Mapping[str, str] = MappingProxyType(
    {
        "capture": "conflict-on-existing-output",
        "publish": "content-idempotent",
        "publish-native": "content-idempotent",
        "restore": "reconcile-replace",
        "sleep": "convergent",
        "wake": "convergent",
        "status": "convergent",
    }
)
#: A restore's prepare-only run changes nothing, so it can always be repeated.
PREPARE_ONLY_REPLAY = "safe-repeat"
#: The name startup measurements are reported under.
STARTUP_OBSERVATION = "rank0-acceptance-v1"
#: The unit of rank 0 (units are ``unit-<index>`` and rank = index).
RANK0_UNIT = "unit-0"
#: Controller span name -> measurement name.
STARTUP_MEASUREMENTS: Mapping[str, str] = MappingProxyType(
    {
        "runtime.startup_port_open": "ttr_port_open_s",
        "runtime.startup_http_ready": "ttr_http_ready_s",
        "runtime.startup_ttft": "ttft_s",
    }
)


def check_receipt(receipt: Receipt, *, request: Mapping[str, Any], exit_code: int) -> None:
    """Raise :class:`ReceiptError` where the receipt contradicts the request or the controller's exit code.

    In the contract's order: ``operation_id``, ``operation``, ``engine`` and
    ``snapshot_driver`` must be what was requested; ``state`` must be
    ``succeeded`` after exit code 0 and ``failed`` after any other.
    """
    for field, value, path in (
        ("operation_id", receipt.operation_id, ("id",)),
        ("operation", receipt.operation, ("operation",)),
        ("engine", receipt.engine, ("launch", "engine")),
        ("snapshot_driver", receipt.snapshot_driver, ("snapshot_driver", "id")),
    ):
        expected = request_value(request, *path)
        if value != expected:
            raise ReceiptError(
                f"receipt {field} is {quote(value)}; the request's {'.'.join(path)} is {quote(expected)}"
            )
    expected_state = "succeeded" if exit_code == 0 else "failed"
    if receipt.state != expected_state:
        raise ReceiptError(
            f"receipt state is {receipt.state!r}, but the controller exited with code {exit_code}; "
            f"expected {expected_state!r}"
        )


def stream_warnings(
    receipt: Receipt,
    stream: TimingStream | None,
    stream_error: str | None,
    *,
    prepare_only: bool = False,
    request_sha256: str | None = None,
) -> list[str]:
    """The soft problems of a run whose receipt passed :func:`check_receipt`, one sentence each.

    ``stream`` is what was read of the timing stream (None if nothing was),
    ``stream_error`` why reading it stopped, if it did. A stream that failed
    is reported once, by its error, and not compared further: its records
    after the failure were never read. ``request_sha256`` is the digest
    sparkrun computed for the request it sent, when the caller has it.
    """
    warnings: list[str] = []
    failure = stream_error or (stream.failure if stream is not None else None)
    if failure:
        warnings.append(f"The timing stream could not be read to its end: {failure}.")
    elif stream is None or stream.records == 0:
        warnings.append("The controller wrote no timing stream records.")
    elif not stream.complete:
        warnings.append(
            f"The timing stream ended after {stream.records} records without stream_complete "
            f"({len(stream.open_spans)} spans still open)."
        )
    if stream is not None and not failure:
        if stream.request_sha256 is not None and stream.request_sha256 != receipt.request_sha256:
            warnings.append(
                f"The timing stream's request_sha256 {stream.request_sha256} differs from "
                f"the receipt's {receipt.request_sha256}."
            )
        timing_digest = sha256_digest(receipt.timing)
        if stream.timing_sha256 is not None and stream.timing_sha256 != timing_digest:
            warnings.append(
                f"The timing stream's timing_sha256 {stream.timing_sha256} differs from "
                f"{timing_digest}, the digest of the receipt's timing."
            )
        if stream.state is not None and stream.state != receipt.state:
            warnings.append(f"The timing stream ended {stream.state!r}, but the receipt's state is {receipt.state!r}.")
    if request_sha256 is not None and receipt.request_sha256 != request_sha256:
        warnings.append(
            f"The receipt's request_sha256 {receipt.request_sha256} differs from {request_sha256}, "
            "the digest sparkrun computed for the request it sent."
        )
    expected = PREPARE_ONLY_REPLAY if prepare_only else REPLAY_SEMANTICS.get(receipt.operation)
    if receipt.replay_semantics != expected:
        run = f"a {receipt.operation} prepare-only run" if prepare_only else f"a {receipt.operation}"
        warnings.append(f"The receipt's replay_semantics is {quote(receipt.replay_semantics)}; {run} has {expected!r}.")
    return warnings


def startup_measurements(receipt: Receipt) -> dict[str, float]:
    """Seconds to port open, HTTP ready and first token of the rank-0 unit, as far as the receipt has them.

    From the receipt's ``runtime.startup_*`` spans that completed ``ok`` and
    belong to ``unit-0`` (by ``attributes.unit``, else the clock's ``unit``) or
    to no unit; a span naming ``unit-0`` wins over one naming none, and the
    first wins among equals. Reported under :data:`STARTUP_OBSERVATION`.
    """
    best: dict[str, tuple[int, float]] = {}
    for span in receipt.spans:
        name = STARTUP_MEASUREMENTS.get(span.name)
        if name is None or span.status != "ok" or span.duration_seconds is None:
            continue
        clock = receipt.clocks.get(span.clock)
        unit = span.attributes.get("unit") or (clock.unit if clock is not None else None)
        if unit is not None and unit != RANK0_UNIT:
            continue
        rank = 0 if unit == RANK0_UNIT else 1
        if name not in best or rank < best[name][0]:
            best[name] = (rank, float(span.duration_seconds))
    return {name: best[name][1] for name in STARTUP_MEASUREMENTS.values() if name in best}
