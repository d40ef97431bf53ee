"""Every receipt check, through the CLI, against the example controller told to misbehave.

Hard errors fail the operation with one ``error:`` line naming the field; timing stream problems are
warnings and the receipt stays authoritative.
"""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.integration

RECEIPT = r"receipt \S+/coldsnap/runs/[0-9a-f]{32}/execute/operation\.json: "


@pytest.mark.parametrize(
    ("modes", "error"),
    [
        (("invalid-receipt",), RECEIPT + r"not JSON \(Expecting value at line 1 column 1\)"),
        (('receipt-field:kind="x"',), RECEIPT + r"kind is 'x'; expected 'coldsnap-operation-receipt'"),
        (("receipt-field:format=3",), RECEIPT + r"format is 3; expected 2"),
        (
            ('receipt-field:operation_id="other"',),
            r"receipt operation_id is 'other'; the request's id is 'snap-status'",
        ),
        (('receipt-field:operation="wake"',), r"receipt operation is 'wake'; the request's operation is 'status'"),
        (('receipt-field:engine="vllm"',), r"receipt engine is 'vllm'; the request's launch.engine is 'process'"),
        (
            ('receipt-field:snapshot_driver="n610"',),
            r"receipt snapshot_driver is 'n610'; the request's snapshot_driver.id is 'n580'",
        ),
        (("exit:1",), r"receipt state is 'succeeded', but the controller exited with code 1; expected 'failed'"),
        (
            ('receipt-field:state="failed"', 'receipt-field:error="boom"'),
            r"receipt state is 'failed', but the controller exited with code 0; expected 'succeeded'",
        ),
        (("receipt-field:timing.format=2",), RECEIPT + r"timing.format is 2; expected 1"),
        (
            ('receipt-field:timing.spans=[{"id": "x"}]',),
            RECEIPT + r"timing.spans\[0\] has no 'name'; it is required",
        ),
        (
            ("crash-mid-stream",),
            r"the ColdSnap controller exited with code 70 and wrote no receipt: "
            r"coldsnap-example: crashing mid-stream \(--misbehave crash-mid-stream\)",
        ),
        (("missing-receipt", "exit:3"), r"the ColdSnap controller exited with code 3 and wrote no receipt"),
    ],
    ids=[
        "not-json",
        "kind",
        "format",
        "operation_id",
        "operation",
        "engine",
        "snapshot_driver",
        "succeeded-but-exit-1",
        "failed-but-exit-0",
        "timing",
        "timing-span",
        "crash-no-receipt",
        "exit-no-receipt",
    ],
)
def test_hard_errors_fail_with_one_line_naming_the_field(snap, modes, error):
    done = snap.cli("status", modes=modes)
    assert done.returncode == 1, done.stdout
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert re.fullmatch("error: " + error, last), last


@pytest.mark.parametrize(
    ("modes", "warning"),
    [
        (
            ("wrong-digest",),
            r"The timing stream's timing_sha256 sha256:f{64} differs from sha256:[0-9a-f]{64}, "
            r"the digest of the receipt's timing\.",
        ),
        (
            ("wrong-request-digest",),
            r"The timing stream's request_sha256 sha256:0{64} differs from the receipt's sha256:[0-9a-f]{64}\.",
        ),
        (("state-mismatch",), r"The timing stream ended 'failed', but the receipt's state is 'succeeded'\."),
        (
            ('receipt-field:replay_semantics="safe-repeat"',),
            r"The receipt's replay_semantics is 'safe-repeat'; a status has 'convergent'\.",
        ),
        (
            ("missing-receipt",),
            r"The controller wrote no receipt: its exit code \(0\) is the outcome, "
            r"and its spans are only what the timing stream delivered\.",
        ),
    ],
    ids=["timing-digest", "request-digest", "state", "replay-semantics", "no-receipt"],
)
def test_stream_problems_are_warnings_and_the_receipt_decides(snap, modes, warning):
    done = snap.cli("status", "--json", modes=modes)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    result = records[-1]
    assert result["state"] == "succeeded"
    assert any(re.fullmatch(warning, text) for text in result["warnings"]), result["warnings"]
    reported = [r["message"] for r in records if r.get("level") == "warning" and r.get("stage") == "checks"]
    assert any(re.fullmatch(warning, text) for text in reported)
    plain = snap.cli("status", modes=modes)
    assert any(re.search(warning, line) for line in plain.stdout.splitlines() if line.startswith("warning"))
