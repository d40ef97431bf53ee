"""Framework parsers: a benchmark attempt's stderr lines as feedback reports.

See :mod:`sparkrun.benchmarking.parsers.base` for the interface every parser
implements and what it promises about untrusted input.
"""

from typing import TYPE_CHECKING

from sparkrun.benchmarking.parsers.base import MAX_LINE_CHARS, MAX_PARSER_METRICS, Fields, ProgressParser
from sparkrun.benchmarking.parsers.llama_benchy import LlamaBenchyParser
from sparkrun.benchmarking.parsers.tool_eval_bench import ToolEvalBenchParser

__all__ = [
    "MAX_LINE_CHARS",
    "MAX_PARSER_METRICS",
    "Fields",
    "LlamaBenchyParser",
    "ProgressParser",
    "ToolEvalBenchParser",
]

if TYPE_CHECKING:  # mypy checks that both parsers implement the interface
    _IMPLEMENTATIONS: tuple[type[ProgressParser], ...] = (LlamaBenchyParser, ToolEvalBenchParser)
