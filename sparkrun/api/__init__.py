"""The public library API: launch and manage workloads.

Every call takes ``sctx=`` (from :func:`sparkrun.application.initialize`)
and runs inside an operation boundary, so its events reach ``sctx.events``
and its trace carries the operation id.
"""

from sparkrun.api.benchmark import (
    BenchmarkRequest,
    BenchmarkResult,
    benchmark,
    benchmark_resume,
    benchmark_runs,
    benchmark_setup,
    benchmark_state,
)
from sparkrun.api.coldsnap import ColdSnapOptions, ColdSnapResult, coldsnap
from sparkrun.api.distribute import distribute, distribution_list
from sparkrun.api.launch import PartialLaunchError, RunOptions, RunResult, run
from sparkrun.api.manage import DeploymentStatus, StopResult, logs, status, stop

__all__ = [
    "BenchmarkRequest",
    "BenchmarkResult",
    "ColdSnapOptions",
    "ColdSnapResult",
    "DeploymentStatus",
    "PartialLaunchError",
    "RunOptions",
    "RunResult",
    "StopResult",
    "benchmark",
    "benchmark_resume",
    "benchmark_runs",
    "benchmark_setup",
    "benchmark_state",
    "coldsnap",
    "distribute",
    "distribution_list",
    "logs",
    "run",
    "status",
    "stop",
]
