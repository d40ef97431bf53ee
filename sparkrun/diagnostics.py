"""``sparkrun doctor``: checks that this machine can run and observe operations.

Each check is one activity of a ``doctor`` operation, so the checks report
through the same feedback contract (and, with telemetry on, the same
traces) as any other operation.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from sparkrun.config import env_flag, otlp_endpoint
from sparkrun.core.context import SparkrunContext
from sparkrun.core.operation import operation_scope
from sparkrun.feedback import FeedbackReporter, get_feedback

__all__ = ["CheckResult", "run_diagnostics"]

_CONNECT_TIMEOUT = 1.0


@dataclass(frozen=True)
class CheckResult:
    name: str
    status: str  # succeeded, failed or skipped, as reported
    detail: str

    @property
    def ok(self) -> bool:
        return self.status != "failed"


def _writable(directory: Path) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=directory, prefix=".doctor-"):
        pass
    return f"{directory} is writable"


def _check_state_dir(sctx: SparkrunContext) -> str:
    return _writable(sctx.config.state_dir)


def _check_config(sctx: SparkrunContext) -> str:
    path = sctx.config.path
    return f"read {path}" if path is not None else "no configuration file; using defaults"


def _check_telemetry(sctx: SparkrunContext) -> str:
    endpoint = otlp_endpoint(os.environ)
    if not endpoint:
        return _writable(sctx.config.state_dir / "traces") + " (local trace store)"
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 4318)
        with socket.create_connection((parts.hostname or "localhost", port), timeout=_CONNECT_TIMEOUT):
            pass
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or str(error) or type(error).__name__
        raise OSError(f"cannot reach the OTLP endpoint {endpoint} ({reason})") from None
    return f"OTLP endpoint {endpoint} accepts connections"


_CHECKS = (("state_dir", _check_state_dir), ("config", _check_config), ("telemetry", _check_telemetry))


def _run_check(
    reporter: FeedbackReporter, name: str, check: Callable[[SparkrunContext], str], sctx: SparkrunContext
) -> CheckResult:
    activity = reporter.child(source=f"sparkrun.doctor.{name}")
    activity.progress(f"Checking {name}", stage=name, status="running")
    try:
        detail = check(sctx)
    except OSError as error:
        detail = error.strerror or str(error)
        activity.error(detail, stage=name, status="failed", metrics={"error_type": type(error).__name__})
        return CheckResult(name, "failed", detail)
    activity.progress(detail, stage=name, status="succeeded")
    return CheckResult(name, "succeeded", detail)


def _skip(reporter: FeedbackReporter, name: str, why: str) -> CheckResult:
    reporter.child(source=f"sparkrun.doctor.{name}").progress(why, stage=name, status="skipped")
    return CheckResult(name, "skipped", why)


def run_diagnostics(sctx: SparkrunContext, *, telemetry: bool = True) -> list[CheckResult]:
    """Run every check as one ``doctor`` operation; failures are results, not exceptions.

    With ``telemetry=False`` (``--no-otel``) or ``OTEL_SDK_DISABLED=true`` the
    telemetry check is skipped.
    """
    telemetry = telemetry and not env_flag(os.environ.get("OTEL_SDK_DISABLED"), default=False)
    with operation_scope(sctx, name="doctor"):
        reporter = get_feedback("sparkrun.doctor")
        results = [
            _skip(reporter, name, "telemetry export is off")
            if name == "telemetry" and not telemetry
            else _run_check(reporter, name, check, sctx)
            for name, check in _CHECKS
        ]
        counts = {status: sum(r.status == status for r in results) for status in ("succeeded", "failed", "skipped")}
        failed = counts["failed"] > 0
        status = "failed" if failed else "succeeded"
        summary = f"{counts['succeeded']} of {len(results)} checks passed"
        if counts["skipped"]:
            summary += f", {counts['skipped']} skipped"
        reporter.report(summary, level="error" if failed else "progress", stage="summary", status=status)
    return results
