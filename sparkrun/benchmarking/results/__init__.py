"""Result readers: a framework's result file as headline figures and table rows.

Each reader takes a path (a regular file of bounded size) or an already decoded
object, and says when nothing was measured; every refusal is a
:class:`ResultFileError` (a ``ValueError``) naming the file, the field and the value.
"""

from sparkrun.benchmarking.results.llama_benchy import (
    LlamaBenchyResult,
    LlamaBenchyRow,
    read_llama_benchy_result,
    summarize_llama_benchy,
)
from sparkrun.benchmarking.results.result_files import ResultFileError
from sparkrun.benchmarking.results.tool_eval_bench import (
    ToolEvalBenchResult,
    read_tool_eval_bench_result,
    summarize_tool_eval_bench,
)

__all__ = [
    "LlamaBenchyResult",
    "LlamaBenchyRow",
    "ResultFileError",
    "ToolEvalBenchResult",
    "read_llama_benchy_result",
    "read_tool_eval_bench_result",
    "summarize_llama_benchy",
    "summarize_tool_eval_bench",
]
