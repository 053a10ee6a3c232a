"""One state's cell cannot end the sandbox, reach another state's files, or leave processes behind it."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from sandbox import ExecStatus, Sandbox, SandboxConfig


@pytest.fixture()
def box():
    with Sandbox(SandboxConfig(preload_modules=(), timeout_s=60)) as sandbox:
        yield sandbox


def test_a_kill_all_signal_does_not_end_the_sandbox(box):
    """``os.kill(-1, SIGKILL)`` in one branch used to kill every state and the zygote: afterwards every call
    raised BrokenPipeError. Now the zygote is out of the cells' reach and the tree goes on."""
    root = box.open_root()
    root.run("x = 1")
    sibling = root.branch()
    sibling.run("y = 2")
    bomb = root.branch()
    bomb.run("import os, signal\nos.kill(-1, signal.SIGKILL)")
    time.sleep(0.2)
    assert root.run("x").result == "1"
    assert sibling.run("x + y").result == "3"
    assert root.branch().run("x + 10").result == "11"
    assert box.open_root().run("40 + 2").result == "42"
    if box.isolation.uid is not None:  # the cells run as another user than the zygote: it was never hit
        assert box.stats().zygote_restarts == 0


def test_a_dead_zygote_is_restarted_and_the_tree_goes_on(box):
    root = box.open_root()
    root.run("x = 5")
    child = root.branch()
    child.run("y = 6")
    os.killpg(box._zygote.pid, signal.SIGKILL)
    box._zygote._proc.wait(timeout=10)
    assert child.run("x * y").result == "30"
    assert root.branch().run("x").result == "5"
    assert box.open_root().run("1").result == "1"
    assert box.stats().zygote_restarts == 1
