"""The parser example of docs/benchmark-parsers.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[3] / "docs" / "benchmark-parsers.md"


def test_the_usage_example_runs_verbatim():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) == 2
    exec(compile(blocks[0], str(DOC), "exec"), {})
    exec(compile(blocks[1], str(DOC), "exec"), {})
