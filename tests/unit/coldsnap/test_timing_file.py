"""coldsnap.timing_file.TimingFile: following a file that a writer thread appends to, within bounds."""

from __future__ import annotations

import os
import random
import re
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from sparkrun.plugins.coldsnap import timing_file
from sparkrun.plugins.coldsnap.timing import TimingError, TimingFile, TimingStream
from tests.unit.coldsnap.records import OPERATION_ID, line, typical_stream


def _exactly(message: str):
    return pytest.raises(TimingError, match=f"^{re.escape(message)}$")


class _Writer(threading.Thread):
    """Appends ``data`` to ``path`` in small random pieces with pauses, as a controller flushing would."""

    def __init__(self, path: Path, data: bytes, *, create_after: float = 0.0, seed: int = 7) -> None:
        super().__init__(daemon=True)
        self.path, self.data, self.create_after = path, data, create_after
        self.random = random.Random(seed)
        self.finished = threading.Event()

    def run(self) -> None:
        try:
            time.sleep(self.create_after)
            with open(self.path, "xb", buffering=0) as out:
                position = 0
                while position < len(self.data):
                    size = self.random.randint(1, 300)
                    out.write(self.data[position : position + size])
                    position += size
                    time.sleep(self.random.choice([0, 0, 0.001]))
        finally:
            self.finished.set()


def _follow(reader: TimingFile, writer: _Writer) -> list[bytes]:
    """Poll like the orchestration does until the writer has exited, then drain and finish."""
    lines: list[bytes] = []
    polls = 0
    while not writer.finished.is_set():
        lines += reader.read_lines()
        polls += 1
        time.sleep(0.002)
    writer.join()
    lines += reader.read_lines()
    last = reader.finish()
    if last is not None:
        lines.append(last)
    assert polls > 0
    return lines


def test_a_stream_written_slowly_is_read_line_by_line(tmp_path):
    records = typical_stream()
    data = b"".join(line(item) for item in records)
    writer = _Writer(tmp_path / "timing.ndjson", data, create_after=0.02)
    reader = TimingFile(tmp_path / "timing.ndjson")
    writer.start()
    lines = _follow(reader, writer)
    assert lines == [line(item)[:-1] for item in records]
    stream = TimingStream(OPERATION_ID)
    for item in lines:
        stream.feed(item)
    assert stream.complete


def test_a_final_line_without_newline_is_still_a_record(tmp_path):
    records = typical_stream()
    data = b"".join(line(item) for item in records)[:-1]
    writer = _Writer(tmp_path / "timing.ndjson", data, seed=3)
    reader = TimingFile(tmp_path / "timing.ndjson")
    writer.start()
    lines = _follow(reader, writer)
    assert lines[-1] == line(records[-1])[:-1] and len(lines) == len(records)


def test_a_file_that_does_not_exist_yet_reads_as_no_lines(tmp_path):
    reader = TimingFile(tmp_path / "timing.ndjson")
    assert reader.read_lines() == [] and reader.read_lines() == []
    (tmp_path / "timing.ndjson").write_bytes(b'{"a": 1}\n{"b"')
    assert reader.read_lines() == [b'{"a": 1}']
    with open(tmp_path / "timing.ndjson", "ab") as out:
        out.write(b": 2}\n")
    assert reader.read_lines() == [b'{"b": 2}']
    assert reader.finish() is None


def test_a_partial_line_is_kept_until_its_newline_arrives(tmp_path):
    path = tmp_path / "timing.ndjson"
    path.write_bytes(b"abc")
    reader = TimingFile(path)
    assert reader.read_lines() == []
    with open(path, "ab") as out:
        out.write(b"def\nghi\n\njk")
    assert reader.read_lines() == [b"abcdef", b"ghi", b""]
    assert reader.finish() == b"jk"


def test_a_file_that_never_appears_finishes_with_nothing(tmp_path):
    reader = TimingFile(tmp_path / "timing.ndjson")
    assert reader.read_lines() == [] and reader.finish() is None


def test_after_finish_there_is_nothing_more(tmp_path):
    path = tmp_path / "timing.ndjson"
    path.write_bytes(b"a\n")
    reader = TimingFile(path)
    assert reader.read_lines() == [b"a"] and reader.finish() is None
    with open(path, "ab") as out:
        out.write(b"b\n")
    assert reader.read_lines() == [] and reader.finish() is None


def test_a_line_of_64_kib_is_accepted_and_one_byte_more_is_refused(tmp_path):
    path = tmp_path / "timing.ndjson"
    path.write_bytes(b"x" * 65536 + b"\n" + b"y" * 65537 + b"\n")
    reader = TimingFile(path)
    assert reader.read_lines() == [b"x" * 65536]
    with _exactly("timing line 2: the record is 65537 bytes long; the limit is 65536 bytes"):
        reader.read_lines()


def test_a_line_growing_past_64_kib_without_newline_is_refused_while_written(tmp_path):
    path = tmp_path / "timing.ndjson"
    writer = _Writer(path, b'{"first": 1}\n' + b"z" * 70_000, seed=11)
    reader = TimingFile(path)
    writer.start()
    lines: list[bytes] = []
    with _exactly("timing line 2: more than 65536 bytes without a newline; the limit is 65536 bytes per record"):
        while True:  # the writer finishes: the error must come by then
            done = writer.finished.is_set()
            lines += reader.read_lines()
            if done:
                reader.read_lines()
                pytest.fail("a 70000-byte line without newline was not refused")
            time.sleep(0.001)
    assert lines == [b'{"first": 1}']
    writer.join()


def test_lines_before_an_error_are_returned_and_the_error_comes_next(tmp_path):
    path = tmp_path / "timing.ndjson"
    path.write_bytes(b"one\ntwo\n" + b"z" * 70_000)
    reader = TimingFile(path)
    assert reader.read_lines() == [b"one", b"two"]
    message = "timing line 3: more than 65536 bytes without a newline; the limit is 65536 bytes per record"
    with _exactly(message):
        reader.read_lines()
    with _exactly(message) as caught:
        reader.read_lines()
    assert caught.value.line == 3
    with _exactly(message):
        reader.finish()


def test_memory_stays_bounded_on_an_endless_line(tmp_path):
    path = tmp_path / "timing.ndjson"
    with open(path, "wb") as out:
        for _ in range(64):
            out.write(b"q" * (1 << 20))
    reader = TimingFile(path)
    tracemalloc.start()
    try:
        with pytest.raises(TimingError, match=r"^timing line 1: more than 65536 bytes without a newline"):
            reader.read_lines()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20  # a 64 MiB line, read with well under 1 MiB


def test_more_than_8192_lines_are_refused(tmp_path):
    path = tmp_path / "timing.ndjson"
    path.write_bytes(b"{}\n" * 8193)
    reader = TimingFile(path)
    assert len(reader.read_lines()) == 8192
    with _exactly("timing line 8193: more than 8192 lines; a stream has at most 8192 records"):
        reader.read_lines()


def test_a_trailing_partial_line_counts_towards_the_line_limit(tmp_path):
    path = tmp_path / "timing.ndjson"
    path.write_bytes(b"{}\n" * 8192 + b"{}")
    reader = TimingFile(path)
    assert len(reader.read_lines()) == 8192
    with _exactly("timing line 8193: more than 8192 lines; a stream has at most 8192 records"):
        reader.finish()


# Regular files only


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "timing.ndjson")
    outcome: list[BaseException] = []
    reader = TimingFile(tmp_path / "timing.ndjson")

    def read() -> None:
        try:
            reader.read_lines()
        except TimingError as error:
            outcome.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "reading a FIFO blocked"
    assert str(outcome[0]) == f"the timing file is not a regular file (path={tmp_path / 'timing.ndjson'}, a named pipe)"


def test_a_symlink_to_a_device_is_refused(tmp_path):
    (tmp_path / "timing.ndjson").symlink_to("/dev/zero")
    with _exactly(f"the timing file is not a regular file (path={tmp_path / 'timing.ndjson'}, a character device)"):
        TimingFile(tmp_path / "timing.ndjson").read_lines()


def test_a_directory_is_refused(tmp_path):
    (tmp_path / "timing.ndjson").mkdir()
    with _exactly(f"the timing file is not a regular file (path={tmp_path / 'timing.ndjson'}, a directory)"):
        TimingFile(tmp_path / "timing.ndjson").read_lines()


def test_a_symlink_to_a_regular_file_is_followed(tmp_path):
    (tmp_path / "real.ndjson").write_bytes(b"a\n")
    (tmp_path / "timing.ndjson").symlink_to(tmp_path / "real.ndjson")
    assert TimingFile(tmp_path / "timing.ndjson").read_lines() == [b"a"]


def test_an_unreadable_file_is_an_error(tmp_path, monkeypatch):
    path = tmp_path / "timing.ndjson"
    path.write_bytes(b"a\n")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(timing_file.os, "open", refuse)  # the suite may run as root, who may read anything
    with _exactly(f"cannot read the timing file (path={path}, Permission denied)"):
        TimingFile(path).read_lines()


def test_close_releases_the_file(tmp_path):
    path = tmp_path / "timing.ndjson"
    path.write_bytes(b"a\n")
    with TimingFile(path) as reader:
        reader.read_lines()
        descriptor = reader._fd
        assert descriptor is not None
    with pytest.raises(OSError):
        os.fstat(descriptor)
