"""The specification's producer fragment runs verbatim.

The consumer fragment (``api.run`` against a recipe) runs verbatim in
``tests/integration/test_launch_api.py``, with a real workload.
"""

from __future__ import annotations

import textwrap

from sparkrun.core.operation import operation_scope

PRODUCER_FRAGMENT = textwrap.dedent(
    """
    from sparkrun.plugins import get_feedback

    feedback = get_feedback("my-plugin", sctx=sctx)
    receiver = feedback.child(host="spark-1")
    receiver.progress(
        "Receiving missing layers",
        stage="transfer",
        status="running",
        current=1048576,
        total=4194304,
        total_kind="upper_bound",
        unit="bytes",
        metrics={"bytes_per_second": 524288, "reused_layers": 2},
    )
    with receiver.heartbeat("Verifying image"):
        verify_image()
    receiver.progress("Image verified", stage="verify", status="succeeded")
    """
)


def test_producer_fragment_runs_verbatim_inside_an_operation(sctx):
    from tests.conftest import drain

    with operation_scope(sctx, name="relay") as operation:
        exec(PRODUCER_FRAGMENT, {"sctx": sctx, "verify_image": lambda: None})
    events = drain(sctx.queue)
    assert [e["message"] for e in events] == ["Receiving missing layers", "Verifying image", "Image verified"]
    assert all(e["operation_id"] == operation.operation_id and e["host"] == "spark-1" for e in events)
    assert events[0]["total_kind"] == "upper_bound" and events[-1]["status"] == "succeeded"
