"""Isolated environments for benchmark tools: installed on first use, cached, pinned, recorded.

A framework's tool (and everything it pulls in: transformers, aiohttp, ...)
never enters sparkrun's own environment. Each pinned requirement gets a
virtual environment of its own under the cache directory
(``SPARKRUN_BENCHMARK_ENVS``, else ``$XDG_CACHE_HOME/sparkrun/benchmark-envs``,
else ``~/.cache/sparkrun/benchmark-envs``), installed from the package index
the first time a run needs it, under a lock so two runs never install the
same environment at once. The environment counts as ready only once a
marker file is written after the install worked (a venv cannot be moved:
its scripts name their interpreter by path), so an install cut short is
redone. The installed version is read back from the
environment and recorded in the run's results.
"""

from __future__ import annotations

import fcntl
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sparkrun.config import xdg_location
from sparkrun.errors import BenchmarkError
from sparkrun.feedback import FeedbackReporter

__all__ = ["FrameworkEnvironment", "environments_root", "prepare_environment"]

_MARKER = ".sparkrun-environment.json"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_INSTALL_TIMEOUT = 1800.0
_OUTPUT_TAIL = 2000


def environments_root() -> Path:
    """``SPARKRUN_BENCHMARK_ENVS``, else ``$XDG_CACHE_HOME/sparkrun/benchmark-envs``, else under ``~/.cache``."""
    return xdg_location("SPARKRUN_BENCHMARK_ENVS", "XDG_CACHE_HOME", ".cache", "sparkrun", "benchmark-envs")


@dataclass(frozen=True)
class FrameworkEnvironment:
    """A ready environment: where its executables are, and what is installed."""

    path: Path
    requirement: str
    version: str

    @property
    def bin_dir(self) -> Path:
        return self.path / "bin"


def _distribution(requirement: str) -> str:
    return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]


def _read_marker(path: Path, requirement: str) -> FrameworkEnvironment | None:
    try:
        recorded = json.loads((path / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or recorded.get("requirement") != requirement:
        return None
    return FrameworkEnvironment(path, requirement, str(recorded.get("version", "")))


def _run(argv: list[str], what: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_INSTALL_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"{what} took longer than {_INSTALL_TIMEOUT:.0f} s and was stopped") from None
    except OSError as error:
        raise BenchmarkError(f"{what} could not start: {error}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-_OUTPUT_TAIL:]
        raise BenchmarkError(f"{what} failed (exit code {done.returncode}): {tail}")
    return done.stdout


def _install(target: Path, requirement: str) -> str:
    """Create the environment in ``target`` and return the installed version of the requirement."""
    _run([sys.executable, "-m", "venv", str(target)], f"creating the environment for {requirement}")
    python = str(target / "bin" / "python")
    _run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", requirement],
        f"installing {requirement}",
    )
    distribution = _distribution(requirement)
    code = f"import importlib.metadata as m; print(m.version({distribution!r}))"
    return _run([python, "-c", code], f"reading the installed version of {distribution}").strip()


def prepare_environment(requirement: str | None, feedback: FeedbackReporter | None = None) -> FrameworkEnvironment:
    """The environment of ``requirement``, installed now if it is not cached yet.

    ``None`` is a tool that needs nothing installed (an in-house script): it
    runs with the interpreter running sparkrun.
    """
    if requirement is None:
        return FrameworkEnvironment(Path(sys.executable).parent.parent, "", "")
    root = environments_root()
    path = root / _UNSAFE.sub("_", requirement)
    ready = _read_marker(path, requirement)
    if ready is not None:
        return ready
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run installing the same one: wait for it
        ready = _read_marker(path, requirement)
        if ready is not None:
            return ready
        shutil.rmtree(path, ignore_errors=True)  # an install that was cut short
        activity = feedback.child(source="benchmark.environment") if feedback is not None else None
        try:
            if activity is not None:
                with activity.heartbeat(f"Installing {requirement} into {path}", interval=10.0):
                    version = _install(path, requirement)
            else:
                version = _install(path, requirement)
            (path / _MARKER).write_text(json.dumps({"requirement": requirement, "version": version}))
        except BaseException as error:
            shutil.rmtree(path, ignore_errors=True)
            if activity is not None:
                activity.error(f"Could not install {requirement}: {error}", status="failed")
            raise
        if activity is not None:
            activity.progress(f"Installed {requirement} ({version})", status="succeeded", metrics={"version": version})
        return FrameworkEnvironment(path, requirement, version)
