"""``api.coldsnap``: ColdSnap operations (capture, restore, sleep, wake, status) through a controller.

The controller is an external program (see docs/coldsnap.md); this call
builds its request, runs it with its timing stream read live, checks its
receipt, and returns what happened. The raised exception or the returned
:class:`~sparkrun.plugins.coldsnap.flow.ColdSnapResult` is the authoritative
outcome.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkrun.application import initialize
from sparkrun.core.context import SparkrunContext
from sparkrun.core.operation import operation_scope
from sparkrun.core.redaction import Redactor
from sparkrun.plugins.coldsnap.flow import ColdSnapResult, run_coldsnap

__all__ = ["ColdSnapOptions", "ColdSnapResult", "coldsnap"]


@dataclass(frozen=True)
class ColdSnapOptions:
    """What to run: ``operation`` on ``target`` (a recipe name or path, or a running deployment's name).

    ``controller`` (a command line) and ``snapshot_driver`` override the
    recipe's ``coldsnap:`` section and the configuration file.
    """

    operation: str
    target: str
    controller: str | None = None
    snapshot_driver: str | None = None


def coldsnap(options: ColdSnapOptions, *, sctx: SparkrunContext | None = None) -> ColdSnapResult:
    """Run one ColdSnap operation as a ``coldsnap`` operation of sparkrun."""
    sctx = sctx if sctx is not None else initialize()
    # The controller gets the recipe's environment; whatever of it looks secret is redacted from what comes back.
    with operation_scope(sctx, name="coldsnap", processors=(Redactor(),)) as operation:
        return run_coldsnap(
            sctx,
            operation,
            options.operation,
            options.target,
            controller=options.controller,
            snapshot_driver=options.snapshot_driver,
        )
