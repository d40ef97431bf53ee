"""The public library API: launch and manage workloads.

Every call takes ``sctx=`` (from :func:`sparkrun.application.initialize`)
and runs inside an operation boundary, so its events reach ``sctx.events``
and its trace carries the operation id.
"""

from sparkrun.api.coldsnap import ColdSnapOptions, ColdSnapResult, coldsnap
from sparkrun.api.launch import RunOptions, RunResult, run
from sparkrun.api.manage import DeploymentStatus, StopResult, logs, status, stop

__all__ = [
    "ColdSnapOptions",
    "ColdSnapResult",
    "DeploymentStatus",
    "RunOptions",
    "RunResult",
    "StopResult",
    "coldsnap",
    "logs",
    "run",
    "status",
    "stop",
]
