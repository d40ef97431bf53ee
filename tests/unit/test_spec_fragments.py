"""The specification's two code fragments run verbatim.

The consumer fragment's ``api.run`` call arrives with the launch pipeline;
until then a recipe-free custom pipeline stands in for it, as the contract
allows for pipelines outside a core API boundary.
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

CONSUMER_FRAGMENT = textwrap.dedent(
    """
    from sparkrun.application import initialize
    from sparkrun import api

    sctx = initialize()
    from queue import SimpleQueue

    event_queue = SimpleQueue()
    sctx.events = event_queue.put
    result = api.run(api.RunOptions(recipe="my-recipe", detached=True), sctx=sctx)
    """
)


class _CustomPipeline:
    """Stands in for ``sparkrun.api`` until the launch pipeline exists."""

    class RunOptions:
        def __init__(self, **options):
            self.options = options

    @staticmethod
    def run(options, *, sctx):
        with operation_scope(sctx, name="run") as operation:
            exec(PRODUCER_FRAGMENT, {"sctx": sctx, "verify_image": lambda: None})
        return operation


def test_producer_fragment_runs_verbatim_inside_an_operation(sctx):
    from tests.conftest import drain

    with operation_scope(sctx, name="relay") as operation:
        exec(PRODUCER_FRAGMENT, {"sctx": sctx, "verify_image": lambda: None})
    events = drain(sctx.queue)
    assert [e["message"] for e in events] == ["Receiving missing layers", "Verifying image", "Image verified"]
    assert all(e["operation_id"] == operation.operation_id and e["host"] == "spark-1" for e in events)
    assert events[0]["total_kind"] == "upper_bound" and events[-1]["status"] == "succeeded"


def test_consumer_fragment_runs_verbatim_with_a_custom_pipeline(monkeypatch):
    import sparkrun

    monkeypatch.setattr(sparkrun, "api", _CustomPipeline, raising=False)
    namespace: dict = {}
    exec(CONSUMER_FRAGMENT, namespace)
    queue, result = namespace["event_queue"], namespace["result"]
    received = []
    while not queue.empty():
        received.append(queue.get())
    assert result.outcome == "succeeded"
    assert [e["message"] for e in received] == ["Receiving missing layers", "Verifying image", "Image verified"]
    assert {e["operation_id"] for e in received} == {result.operation_id}
