"""core.processes: a recorded identity matches only its own live process; signals only to proven leaders."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sparkrun.core.processes import MARKER_VARIABLE, ProcessIdentity, new_marker, signal_group, start_ticks


@pytest.fixture
def child():
    marker = new_marker()
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        env={**os.environ, MARKER_VARIABLE: marker},
        start_new_session=True,
    )
    yield process, ProcessIdentity.of(process.pid, marker=marker)
    process.kill()
    process.wait()


def test_an_identity_matches_its_process_until_it_exits(child):
    process, identity = child
    assert identity.matches()
    assert ProcessIdentity.from_json(identity.to_json()) == identity
    process.kill()
    process.wait()
    assert not identity.matches()


@pytest.mark.parametrize(
    "change",
    [
        {"start_ticks": None},
        {"marker": "another-marker"},
        {"boot_id": "another-boot"},
        {"pid": 1},
        {"pid": 0},
        {"pid": -1},
    ],
)
def test_an_identity_that_differs_in_anything_does_not_match(child, change):
    _, identity = child
    changed = ProcessIdentity(**{**identity.to_json(), **change})
    assert not changed.matches()
    assert signal_group(changed, signal.SIGKILL) is False


def test_a_marker_lost_with_the_environment_is_replaced_by_the_command_line(child):
    process, _ = child
    by_cmdline = ProcessIdentity.of(process.pid, marker="not-in-its-environment", with_cmdline=True)
    assert by_cmdline.matches()


def test_the_callers_own_group_is_never_signalled():
    me = ProcessIdentity.of(os.getpid())
    assert me.matches()
    assert signal_group(me, 0) is False  # a real signal would have been sent to this test's own group


def test_a_proven_leader_is_signalled(child):
    process, identity = child
    assert identity.matches(), (identity, start_ticks(process.pid), os.getpgid(process.pid))
    assert signal_group(identity, signal.SIGTERM) is True, (identity, os.getpgid(process.pid), os.getpgrp())
    assert process.wait(timeout=10) == -signal.SIGTERM


@pytest.mark.parametrize("data", [None, [], {"pid": "1"}, {"pid": 5, "start_ticks": "x"}, {"pid": 5, "marker": 3}])
def test_a_malformed_record_is_no_identity(data):
    assert ProcessIdentity.from_json(data) is None


def test_start_ticks_of_nothing_is_none():
    assert start_ticks(0) is None and start_ticks(-5) is None and start_ticks(2**22 + 12345) is None
