"""The exception hierarchy callers can act on.

Contract validation (feedback envelopes) keeps raising ``ValueError`` as the
feedback specification requires; everything else sparkrun raises on purpose
derives from :class:`SparkrunError`.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "DaemonError",
    "DeploymentError",
    "LaunchError",
    "OperationCancelled",
    "RecipeError",
    "SparkrunError",
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


class DaemonError(SparkrunError):
    """The daemon cannot start, is not running, or answered with an error."""
