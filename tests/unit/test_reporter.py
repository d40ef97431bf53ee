"""The producer API: envelopes, children, log rendering, operation binding."""

from __future__ import annotations

import contextlib
import inspect
import logging
import threading

import pytest

import sparkrun.feedback as feedback_module
import sparkrun.plugins as plugins_module
from sparkrun.core import log_bridge
from sparkrun.core.operation import operation_scope
from tests.conftest import drain

REQUIRED = ("type", "feedback_version", "operation_id", "timestamp", "source", "message", "level", "activity_id")


def test_plugins_reexports_the_same_objects():
    for name in ("FEEDBACK_API_VERSION", "get_feedback", "FeedbackReporter", "FeedbackEvent"):
        assert getattr(plugins_module, name) is getattr(feedback_module, name)
    assert plugins_module.FEEDBACK_API_VERSION == 1


def test_envelope_has_the_required_fields(sctx):
    with operation_scope(sctx, name="t") as operation:
        event = feedback_module.get_feedback("plug").progress("hello")
    assert tuple(event)[: len(REQUIRED)] == REQUIRED
    assert event["type"] == "feedback" and event["feedback_version"] == 1
    assert event["operation_id"] == operation.operation_id
    assert len(event["operation_id"]) == 32 and int(event["operation_id"], 16) >= 0
    assert event["source"] == "plug" and event["message"] == "hello" and event["level"] == "progress"
    assert "parent_id" not in event and "host" not in event and "total_kind" not in event


def test_report_returns_the_delivered_envelope(sctx):
    with operation_scope(sctx, name="t"):
        returned = feedback_module.get_feedback("plug").progress(
            "x", stage="s", current=1, total=2, total_kind="exact", unit="files"
        )
    (delivered,) = drain(sctx.queue)
    assert delivered is returned
    assert returned["total_kind"] == "exact"


def test_counter_without_total_is_unknown_kind():
    event = feedback_module.get_feedback("plug").progress("x", current=5)
    assert event["total_kind"] == "unknown" and "total" not in event


def test_metrics_are_copied_from_the_caller():
    metrics = {"rate": 1}
    event = feedback_module.get_feedback("plug").progress("x", metrics=metrics)
    metrics["rate"] = 2
    assert event["metrics"] == {"rate": 1}


@pytest.mark.parametrize(("method", "level"), [("progress", "progress"), ("warning", "warning"), ("error", "error")])
def test_level_methods(method, level):
    assert getattr(feedback_module.get_feedback("plug"), method)("x")["level"] == level


@pytest.mark.parametrize("level", ["debug", "info", "progress", "warning", "error"])
def test_report_any_level(level):
    assert feedback_module.get_feedback("plug").report("x", level=level)["level"] == level


def test_child_keeps_operation_and_links_parent(sctx):
    with operation_scope(sctx, name="t"):
        parent = feedback_module.get_feedback("plug")
        child = parent.child(host="spark-1")
        grandchild = child.child(source="plug.sub")
        child.progress("c")
        grandchild.progress("g")
    first, second = drain(sctx.queue)
    assert child.parent_id == parent.activity_id and child.activity_id != parent.activity_id
    assert first["parent_id"] == parent.activity_id and first["host"] == "spark-1"
    assert second["parent_id"] == child.activity_id and second["source"] == "plug.sub"
    assert second["host"] == "spark-1"  # inherited
    assert first["operation_id"] == second["operation_id"] == parent.operation_id


def test_child_accepts_a_foreign_activity_id():
    parent = feedback_module.get_feedback("plug")
    foreign = f"{parent.activity_id}.ctrl-span-7"
    child = parent.child(activity_id=foreign)
    assert child.activity_id == foreign and child.progress("x")["activity_id"] == foreign


def test_reporter_exposes_identity():
    reporter = feedback_module.get_feedback("plug").child(host="h1")
    assert reporter.source == "plug" and reporter.host == "h1"
    assert isinstance(reporter.activity_id, str) and isinstance(reporter.parent_id, str)


def test_progress_level_name_is_registered():
    assert logging.getLevelName(25) == "PROGRESS"
    assert logging.getLevelName("PROGRESS") == 25


@pytest.mark.parametrize(
    ("level", "levelno"), [("debug", 10), ("info", 20), ("progress", 25), ("warning", 30), ("error", 40)]
)
def test_each_report_renders_exactly_one_record(caplog, level, levelno):
    caplog.set_level(logging.DEBUG, logger="plug")
    feedback_module.get_feedback("plug").report("rendered", level=level)
    records = [r for r in caplog.records if r.name == "plug"]
    assert [(r.levelno, r.getMessage()) for r in records] == [(levelno, "rendered")]
    assert records[0].pathname == __file__  # attributed to the producer's call site


def test_log_message_false_renders_nothing_but_delivers(sctx, caplog):
    caplog.set_level(logging.DEBUG)
    with operation_scope(sctx, name="t"):
        feedback_module.get_feedback("plug").progress("quiet", log_message=False)
    assert not [r for r in caplog.records if r.name == "plug"]
    assert [e["message"] for e in drain(sctx.queue)] == ["quiet"]


def test_events_are_emitted_regardless_of_logging_verbosity(sctx):
    logging.getLogger("plug").setLevel(logging.CRITICAL)
    try:
        with operation_scope(sctx, name="t"):
            reporter = feedback_module.get_feedback("plug")
            for level in ("debug", "info", "progress", "warning", "error"):
                reporter.report(level, level=level)
    finally:
        logging.getLogger("plug").setLevel(logging.NOTSET)
    assert [e["level"] for e in drain(sctx.queue)] == ["debug", "info", "progress", "warning", "error"]


def test_given_logger_is_used(caplog):
    caplog.set_level(logging.INFO)
    own = logging.getLogger("legacy.plugin.logger")
    feedback_module.get_feedback("plug", logger=own).warning("w")
    assert [r.name for r in caplog.records] == ["legacy.plugin.logger"]


def test_without_operation_or_subscriber_still_logs_and_returns(caplog):
    caplog.set_level(logging.INFO)
    event = feedback_module.get_feedback("plug").warning("alone")
    assert event["message"] == "alone" and len(event["operation_id"]) == 32
    assert [r.getMessage() for r in caplog.records] == ["alone"]


def test_context_subscriber_without_operation_gets_detached_events(sctx):
    event = feedback_module.get_feedback("plug", sctx=sctx).progress("outside any scope")
    assert drain(sctx.queue) == [event]


def test_reporter_keeps_its_operation_in_a_plain_thread(sctx):
    with operation_scope(sctx, name="t") as operation:
        reporter = feedback_module.get_feedback("plug")
        thread = threading.Thread(target=lambda: reporter.progress("from thread"))
        thread.start()
        thread.join()
    (event,) = drain(sctx.queue)
    assert event["operation_id"] == operation.operation_id


def test_get_feedback_with_sctx_in_a_plain_thread_finds_the_operation(sctx):
    with operation_scope(sctx, name="t") as operation:
        created = []
        thread = threading.Thread(target=lambda: created.append(feedback_module.get_feedback("plug", sctx=sctx)))
        thread.start()
        thread.join()
        created[0].progress("late binding")
    (event,) = drain(sctx.queue)
    assert event["operation_id"] == operation.operation_id


# -- the rendered record is the one Logger.log would make -----------------------------------


class _Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def kept():
    """A handler keeping every record of logger ``plug`` (level DEBUG, not propagated)."""
    logger = logging.getLogger("plug")
    handler = _Keep()
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(logging.NOTSET)
        logger.propagate = True


_SAME_ATTRIBUTES = (
    "name",
    "msg",
    "args",
    "levelno",
    "levelname",
    "pathname",
    "filename",
    "module",
    "funcName",
    "exc_info",
    "exc_text",
    "stack_info",
    "thread",
    "threadName",
    "process",
    "processName",
)


def test_a_report_renders_the_record_logger_log_would_make(sctx, kept):
    with operation_scope(sctx, name="t"):
        report_line = inspect.currentframe().f_lineno + 1
        event = feedback_module.get_feedback("plug").progress("same record")
        with log_bridge.suppressed():  # how reports were rendered before the direct path
            logging.getLogger("plug").log(25, "same record", extra={"sparkrun_event": event})
    rendered, logged = kept.records
    assert {k: getattr(rendered, k) for k in _SAME_ATTRIBUTES} == {k: getattr(logged, k) for k in _SAME_ATTRIBUTES}
    assert set(vars(rendered)) == set(vars(logged))
    assert rendered.lineno == report_line and rendered.pathname == __file__
    assert rendered.sparkrun_event is event
    assert [e["type"] for e in drain(sctx.queue)] == ["feedback"]  # the report's record is not bridged


@pytest.mark.parametrize("in_operation", [True, False])
def test_rendered_records_come_from_the_installed_record_factory(sctx, kept, in_operation):
    def scope():
        return operation_scope(sctx, name="t") if in_operation else contextlib.nullcontext()

    with scope():
        previous = logging.getLogRecordFactory()

        def custom_factory(*args, **kwargs):
            record = previous(*args, **kwargs)
            record.custom = True
            return record

        logging.setLogRecordFactory(custom_factory)  # on top of the bridge's factory, inside an operation
        try:
            feedback_module.get_feedback("plug").warning("made by the application's factory")
        finally:
            logging.setLogRecordFactory(previous)
    (record,) = kept.records
    assert record.custom is True and record.sparkrun_event["message"] == "made by the application's factory"
    assert [e["type"] for e in drain(sctx.queue)] == (["feedback"] if in_operation else [])


def test_logger_subclasses_keep_their_overrides(sctx):
    class Stamping(logging.Logger):
        def makeRecord(self, *args, **kwargs):
            record = super().makeRecord(*args, **kwargs)
            record.stamped = True
            return record

    logger = Stamping("plug.stamping")
    handler = _Keep()
    logger.addHandler(handler)
    with operation_scope(sctx, name="t"):
        feedback_module.get_feedback("plug", logger=logger).progress("through Logger.log")
    (record,) = handler.records
    assert record.stamped is True and record.sparkrun_event["message"] == "through Logger.log"
    assert record.pathname == __file__ and record.funcName == "test_logger_subclasses_keep_their_overrides"
    assert [e["type"] for e in drain(sctx.queue)] == ["feedback"]


def test_records_a_handler_logs_while_rendering_a_report_are_not_bridged(sctx, kept):
    class Chatty(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logging.getLogger("chatty.handler").warning("handled %s", record.getMessage())

    chatty = Chatty()
    logging.getLogger("plug").addHandler(chatty)
    try:
        with operation_scope(sctx, name="t"):
            feedback_module.get_feedback("plug").progress("report")
            logging.getLogger("chatty.handler").warning("outside rendering")
    finally:
        logging.getLogger("plug").removeHandler(chatty)
    assert [(e["type"], e["message"]) for e in drain(sctx.queue)] == [
        ("feedback", "report"),
        ("log", "outside rendering"),
    ]


def test_caller_lookup_turned_off_is_respected(kept, monkeypatch):
    monkeypatch.setattr(logging, "_srcfile", None)  # logging's documented switch to skip finding the caller
    feedback_module.get_feedback("plug").progress("no caller")
    (record,) = kept.records
    assert (record.pathname, record.lineno, record.funcName) == ("(unknown file)", 0, "(unknown function)")
