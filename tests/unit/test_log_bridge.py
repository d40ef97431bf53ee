"""The legacy logging bridge forwards accepted PROGRESS+ records as log events."""

from __future__ import annotations

import logging
import threading

from sparkrun.core.operation import operation_scope
from sparkrun.feedback import get_feedback
from tests.conftest import drain


def _logs(sctx):
    return [e for e in drain(sctx.queue) if e["type"] == "log"]


def test_progress_warning_error_records_become_log_events(sctx):
    legacy = logging.getLogger("legacy.plugin")
    legacy.setLevel(logging.DEBUG)
    try:
        with operation_scope(sctx, name="t") as operation:
            legacy.debug("debug detail")
            legacy.info("info detail")
            legacy.log(25, "pulling %s", "model")
            legacy.warning("disk almost full")
            legacy.error("pull failed")
            legacy.critical("very bad")
    finally:
        legacy.setLevel(logging.NOTSET)
    events = _logs(sctx)
    assert [(e["level"], e["message"]) for e in events] == [
        ("progress", "pulling model"),
        ("warning", "disk almost full"),
        ("error", "pull failed"),
        ("error", "very bad"),
    ]
    for event in events:
        assert event["source"] == "legacy.plugin" and event["operation_id"] == operation.operation_id
        assert isinstance(event["timestamp"], float)


def test_records_rejected_by_their_logger_level_are_not_forwarded(sctx):
    with operation_scope(sctx, name="t"):
        logging.getLogger("quiet.plugin").log(25, "below the default WARNING level")
        logging.getLogger("quiet.plugin").warning("accepted")
    assert [e["message"] for e in _logs(sctx)] == ["accepted"]


def test_structured_feedback_is_not_duplicated(sctx):
    logging.getLogger("plug").setLevel(logging.DEBUG)
    try:
        with operation_scope(sctx, name="t"):
            get_feedback("plug").progress("once")
            get_feedback("plug").error("twice?")
    finally:
        logging.getLogger("plug").setLevel(logging.NOTSET)
    assert [e["type"] for e in drain(sctx.queue)] == ["feedback", "feedback"]


def test_exception_text_is_included(sctx):
    with operation_scope(sctx, name="t"):
        try:
            raise OSError("no space left")
        except OSError:
            logging.getLogger("legacy").exception("write failed")
    assert _logs(sctx)[0]["message"] == "write failed: OSError: no space left"


def test_not_forwarded_without_a_subscriber(caplog):
    with operation_scope(None, name="t"):
        logging.getLogger("legacy").warning("nobody listens")
    assert logging.getLogRecordFactory() is logging.LogRecord


def test_not_forwarded_outside_an_operation_or_from_context_free_threads(sctx):
    logging.getLogger("legacy").warning("before")
    with operation_scope(sctx, name="t"):
        thread = threading.Thread(target=lambda: logging.getLogger("legacy").warning("plain thread"))
        thread.start()
        thread.join()
    logging.getLogger("legacy").warning("after")
    assert _logs(sctx) == []


def test_logging_configuration_is_exactly_restored(sctx):
    root = logging.getLogger()
    handler = logging.NullHandler()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    before = (list(root.handlers), root.level, logging.getLogRecordFactory())
    with operation_scope(sctx, name="t"):
        logging.getLogger("legacy").warning("inside")
        assert list(root.handlers) == before[0] and root.level == logging.INFO
    assert (list(root.handlers), root.level, logging.getLogRecordFactory()) == before


def test_last_resort_output_is_unchanged(sctx, capfd):
    root = logging.getLogger()
    saved = root.handlers[:]
    root.handlers.clear()
    try:
        with operation_scope(sctx, name="t"):
            logging.getLogger("legacy").warning("still printed to stderr")
    finally:
        root.handlers[:] = saved
    assert "still printed to stderr" in capfd.readouterr().err


def test_a_factory_installed_during_the_scope_is_respected(sctx):
    with operation_scope(sctx, name="t"):
        previous = logging.getLogRecordFactory()

        def custom_factory(*args, **kwargs):
            record = previous(*args, **kwargs)  # a well-behaved factory chains
            record.custom = True
            return record

        logging.setLogRecordFactory(custom_factory)
        logging.getLogger("legacy").warning("under custom factory")
    assert logging.getLogRecordFactory() is custom_factory
    with operation_scope(sctx, name="t2"):
        logging.getLogger("legacy").warning("second operation")
    # exactly once each, although two bridge factories are now in the chain
    assert [e["message"] for e in _logs(sctx)] == ["under custom factory", "second operation"]


def test_overlapping_operations_restore_the_factory_after_the_last(sctx, tmp_path):
    from sparkrun.application import initialize

    other = initialize(state_dir=tmp_path)
    other.events = lambda event: None
    original = logging.getLogRecordFactory()
    with operation_scope(sctx, name="a"):
        with operation_scope(other, name="b"):
            pass
        assert logging.getLogRecordFactory() is not original
        logging.getLogger("legacy").warning("still bridged")
    assert logging.getLogRecordFactory() is original
    assert [e["message"] for e in _logs(sctx)] == ["still bridged"]
