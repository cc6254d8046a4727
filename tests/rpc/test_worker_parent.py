"""A session worker never outlives its server, even when the server dies before the worker has
asked the kernel to be told (PR_SET_PDEATHSIG is only armed after fork())."""

import os
import sys

import pytest

from kiln.rpc.server import _die_with_parent

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")


def _child_status(server_pid: int) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            _die_with_parent(server_pid)
            os._exit(0)  # still alive: the parent it was told about is its parent
        except BaseException:  # noqa: BLE001
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_worker_whose_server_is_alive_keeps_running():
    assert _child_status(os.getpid()) == 0


def test_worker_whose_server_died_before_prctl_exits_at_once():
    # As if the server had died between fork() and prctl(): the worker's parent is no longer
    # the server it was forked from.
    assert _child_status(os.getpid() + 1_000_000) == 1
