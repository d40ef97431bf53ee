"""sparkrun: launch and manage inference workloads, observably.

Importing the package stays cheap: the feedback API, operations and the CLI
live in submodules that are imported on demand.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
