"""Proving that a process is the one sparkrun started before signalling it.

A bare pid proves nothing: after a crash or a reboot the number may belong to
somebody else's process. So every process sparkrun starts and later signals
(workloads, daemon workers, the daemon itself) is recorded as a
:class:`ProcessIdentity`: its pid, the kernel's start time of that pid, the
boot it started in, and a marker (a token placed in its environment at spawn,
or its command line). A record whose process no longer matches is stale: it is
reported and cleaned, never signalled. Signals go only to group leaders that
match, never to pid 0, 1 or negative pids, and never to the caller's own group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "MARKER_VARIABLE",
    "ProcessIdentity",
    "boot_id",
    "children_of",
    "new_marker",
    "signal_group",
    "spawn_detached",
    "start_ticks",
    "terminate_group",
]

#: The environment variable that carries a process's marker from its spawn.
MARKER_VARIABLE = "SPARKRUN_PROCESS_MARKER"


def start_ticks(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot); None if gone or a zombie."""
    if pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else int(fields[19])


def boot_id() -> str | None:
    """This boot's random id: start times are only comparable within one boot."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def new_marker() -> str:
    """A fresh marker to put in a child's environment under :data:`MARKER_VARIABLE`."""
    return os.urandom(16).hex()  # what secrets.token_hex does, without importing it on remote hosts


def _environ_has(pid: int, marker: str) -> bool:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER_VARIABLE}={marker}".encode() in raw.split(b"\0")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class ProcessIdentity(NamedTuple):
    """What proves that a live pid is still the process recorded at spawn.

    ``marker`` is checked against the process's environment (a token set at
    spawn); ``cmdline`` is the alternative proof for a process that replaced
    its environment. A record with neither start time nor marker proves
    nothing and never matches. A named tuple rather than a dataclass: remote
    hosts import this module on every call, and ``dataclasses`` alone costs
    them about 10 ms.
    """

    pid: int
    start_ticks: int | None
    boot_id: str | None = None
    marker: str | None = None
    cmdline: str | None = None

    @classmethod
    def of(cls, pid: int, *, marker: str | None = None, with_cmdline: bool = False) -> ProcessIdentity:
        """The identity of a process just started (or of the caller itself)."""
        return cls(pid, start_ticks(pid), boot_id(), marker, _cmdline(pid) if with_cmdline else None)

    @classmethod
    def from_json(cls, data: Any) -> ProcessIdentity | None:
        """Read a recorded identity; anything malformed is None (and so never signalled)."""
        if not isinstance(data, dict):
            return None
        pid, ticks = data.get("pid"), data.get("start_ticks")
        if type(pid) is not int or (ticks is not None and type(ticks) is not int):
            return None
        texts = {key: data.get(key) for key in ("boot_id", "marker", "cmdline")}
        if any(value is not None and not isinstance(value, str) for value in texts.values()):
            return None
        return cls(pid, ticks, **texts)

    def to_json(self) -> dict[str, Any]:
        return self._asdict()

    def matches(self) -> bool:
        """Whether the live process with this pid is provably the recorded one."""
        if self.pid <= 1 or self.start_ticks is None:
            return False
        if start_ticks(self.pid) != self.start_ticks:
            return False
        if self.boot_id is not None and boot_id() not in (None, self.boot_id):
            return False
        if self.marker is None and self.cmdline is None:
            return True  # start time within this boot: the strongest proof such a record offers
        if self.marker is not None and _environ_has(self.pid, self.marker):
            return True
        return self.cmdline is not None and _cmdline(self.pid) == self.cmdline


def signal_group(identity: ProcessIdentity, sig: int) -> bool:
    """Send ``sig`` to the process group led by ``identity``, only if it is provably ours.

    Returns whether the signal was sent. Refuses pids <= 1, the caller's own
    group and a pid that does not lead its own group (so never a stranger's
    group by accident), and checks the identity immediately before sending.
    """
    pid = identity.pid
    if pid <= 1 or not identity.matches():
        return False
    try:
        if os.getpgid(pid) != pid or pid == os.getpgrp():
            return False
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def spawn_detached(
    argv: list[str], *, env: Mapping[str, str], cwd: str, log_path: Path
) -> tuple[subprocess.Popen[bytes], ProcessIdentity]:
    """Start ``argv`` in its own session (it outlives its starter; a stop signals its whole group).

    stdout and stderr go to ``log_path``, which starts empty: the log holds
    this run only. The marker in its environment makes its identity provable.
    """
    marker = new_marker()
    with open(log_path, "wb") as log:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **env, MARKER_VARIABLE: marker},
            start_new_session=True,
        )
    return popen, ProcessIdentity.of(popen.pid, marker=marker)


def terminate_group(identity: ProcessIdentity, *, grace: float, poll: float = 0.1) -> str | None:
    """End a process group: SIGTERM, then SIGKILL after ``grace`` seconds.

    Returns how it ended (``terminated``, ``killed`` or ``already exited``),
    or None if the process still matches but no longer leads its own group
    (it is then left alone). Only a process that still proves to be the
    recorded one is signalled.
    """
    if not identity.matches():
        return "already exited"
    outcome = "terminated"
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        if not signal_group(identity, sig):
            return None if identity.matches() else outcome
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and identity.matches():
            time.sleep(poll)
        if not identity.matches():
            return outcome
        outcome = "killed"
    return outcome


def children_of(parent: int) -> list[int]:
    """Pids whose parent is ``parent`` (from ``/proc``): a child is ours until we reap it, so its pid is safe."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the fields after the command name (which may hold spaces and parentheses): state, ppid, ...
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1 and fields[1] == str(parent):
            found.append(int(entry.name))
    return found
