"""The exception hierarchy callers can act on.

Contract validation (feedback envelopes) keeps raising ``ValueError`` as the
feedback specification requires; everything else sparkrun raises on purpose
derives from :class:`SparkrunError`.
"""

from __future__ import annotations

__all__ = [
    "BenchmarkError",
    "ColdSnapError",
    "ConfigError",
    "DaemonError",
    "DeploymentError",
    "DistributionError",
    "HostError",
    "LaunchError",
    "OperationCancelled",
    "RecipeError",
    "ReportedError",
    "SparkrunError",
    "error_type_name",
]


class SparkrunError(Exception):
    """Base of every deliberate sparkrun failure; the CLI renders it as one line."""


class ConfigError(SparkrunError):
    """The configuration file or a configuration value is unusable."""


class OperationCancelled(SparkrunError):
    """Raised inside an operation whose cancellation was requested."""


class RecipeError(SparkrunError):
    """A recipe cannot be found, read or validated; the message names file, line and field."""


class LaunchError(SparkrunError):
    """A workload could not be started or did not become ready."""


class DeploymentError(SparkrunError):
    """A deployment is unknown, already running, or cannot be stopped."""


class DistributionError(SparkrunError):
    """An image or model could not be distributed: no provider, a bad source, or hosts that failed.

    ``result`` (a :class:`~sparkrun.core.distribution.DistributionResult`,
    when the provider ran) says what each host ended with.
    """

    def __init__(self, message: str, result: object | None = None) -> None:
        super().__init__(message)
        self.result = result


class HostError(SparkrunError):
    """A remote host cannot be reached, refuses, or fails a request; ``host`` and ``kind`` say which and why.

    Kinds: ``unreachable``, ``auth``, ``host_key``, ``python_missing``,
    ``port_in_use``, ``command_not_found``, ``not_ready``, ``timeout``,
    ``ssh`` (anything else ssh reported).
    """

    def __init__(self, message: str, *, host: str, kind: str = "ssh") -> None:
        super().__init__(message)
        self.host = host
        self.kind = kind


class DaemonError(SparkrunError):
    """The daemon cannot start, is not running, or answered with an error."""


class BenchmarkError(SparkrunError):
    """A benchmark cannot run: a framework, schedule, argument, environment or run state is unusable."""


class ColdSnapError(SparkrunError):
    """A ColdSnap controller failed, could not run, or its receipt contradicts the request or exit code."""


class ReportedError(Exception):
    """An error known only by its description: type name, message and formatted traceback.

    It stands in for an exception where the original must not travel (its
    text held a secret, see :mod:`sparkrun.core.redaction`) or no longer
    exists (a job's error read back from the daemon's journal). It holds no
    frames and no chained exceptions.
    """

    def __init__(self, type_name: str, message: str, stacktrace: str = "") -> None:
        super().__init__(message)
        self.type_name = type_name
        self.message = message
        self.stacktrace = stacktrace


def error_type_name(error: BaseException) -> str:
    """``module.QualName`` of an exception's type (builtins without a module), as traces show it."""
    if isinstance(error, ReportedError):
        return error.type_name
    kind = type(error)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
