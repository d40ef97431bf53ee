"""core.log_tail: the same lines as reading the whole file, with bounded reads and bounded lines."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkrun.core import log_tail

_content = st.binary(max_size=400).map(lambda raw: raw.replace(b"\r", b""))


def _pieces(data: bytes, max_line: int) -> list[str]:
    """The naive reading: every line (last one even if unfinished), cut into max_line pieces."""
    if not data:
        return []
    if data.endswith(b"\n"):
        data = data[:-1]
    return [
        raw[offset : offset + max_line].decode("utf-8", errors="replace")
        for raw in data.split(b"\n")
        for offset in range(0, max(len(raw), 1), max_line)
    ]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200)
@given(content=_content, count=st.integers(min_value=0, max_value=12), max_line=st.integers(min_value=4, max_value=64))
def test_tail_is_the_end_of_the_naive_reading(tmp_path, content, count, max_line):
    path = tmp_path / "log"
    path.write_bytes(content)
    lines, end = log_tail.tail(path, count, max_line=max_line)
    assert end == len(content)
    expected = _pieces(content, max_line)
    assert lines == (expected[-count:] if count else [])


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200)
@given(content=_content, max_line=st.integers(min_value=4, max_value=64), limit=st.integers(min_value=8, max_value=100))
def test_reading_new_lines_chunk_by_chunk_gives_every_line_once(tmp_path, content, max_line, limit):
    path = tmp_path / "log"
    path.write_bytes(content)
    position, lines = 0, []
    while True:
        new, position, had_data = log_tail.read_new(path, position, final=True, limit=limit, max_line=max_line)
        lines += new
        if not had_data:
            break
    assert lines == _pieces(content, max_line)
    assert all(len(line.encode("utf-8", errors="surrogatepass")) <= 3 * max_line for line in lines)


def test_an_unfinished_line_waits_for_its_newline_unless_it_is_final(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"done\npartial")
    assert log_tail.read_new(path, 0) == (["done"], 5, True)
    assert log_tail.read_new(path, 5) == ([], 5, True)
    assert log_tail.read_new(path, 5, final=True) == (["partial"], 12, True)


def test_a_file_that_shrank_is_read_from_its_start(tmp_path):
    path = tmp_path / "log"
    path.write_bytes(b"a new run\n")
    assert log_tail.read_new(path, 10_000) == (["a new run"], 10, True)


def test_a_missing_file_has_no_lines(tmp_path):
    assert log_tail.tail(Path(tmp_path / "nope"), 3) == ([], 0)
    assert log_tail.read_new(Path(tmp_path / "nope"), 0) == ([], 0, False)
