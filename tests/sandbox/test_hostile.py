"""Hostile cells: each ends its branch with a clear status while the parent stays usable and the host is
untouched."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from sandbox import ExecStatus, Sandbox, SandboxConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def parent(sb):
    state = sb.open_root()
    state.run("import os, sys\nsecret = 'kept'")
    return state


def _parent_ok(parent) -> None:
    assert parent.run("print(secret)").stdout == "kept\n"


def test_infinite_loop_times_out(parent):
    ex = parent.branch().run("while True:\n    pass", timeout=1)
    assert ex.status is ExecStatus.TIMEOUT
    _parent_ok(parent)


def test_segfault_is_a_death_with_the_reason(parent):
    ex = parent.branch().run("import ctypes\nctypes.string_at(0)")
    assert ex.status is ExecStatus.DIED
    assert "Segmentation fault" in ex.observation()
    _parent_ok(parent)


def test_alarm_signal_kills_only_the_branch(parent):
    ex = parent.branch().run("import signal, time\nsignal.alarm(1)\ntime.sleep(5)")
    assert ex.status is ExecStatus.DIED
    _parent_ok(parent)


def test_thread_left_running_makes_branching_fall_back_to_replay(sb, parent):
    child = parent.branch()
    child.run("import threading, time\nt = threading.Thread(target=time.sleep, args=(600,), daemon=True)\n"
              "t.start()\nmarker = 7")
    before = sb.stats().fork_fallbacks
    grandchild = child.branch()
    assert sb.stats().fork_fallbacks == before + 1
    assert grandchild.run("marker, secret").result == "(7, 'kept')"
    _parent_ok(parent)


def test_network_is_unreachable_when_isolated(sb, parent):
    if not sb.isolation.bwrap:
        pytest.skip("bubblewrap not available: no network isolation")
    ex = parent.branch().run("import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=5)")
    assert ex.status is ExecStatus.ERROR and ex.error.ename in ("OSError", "TimeoutError", "ConnectionError")
    _parent_ok(parent)


@pytest.mark.parametrize("target", ["/etc/jupiter_sandbox_probe", "{home}/jupiter_sandbox_probe",
                                    "{repo}/jupiter_sandbox_probe"])
def test_writes_outside_the_workspace_fail(sb, parent, target):
    if not sb.isolation.bwrap:
        pytest.skip("bubblewrap not available: no filesystem isolation")
    path = target.format(home=os.path.expanduser("~"), repo=REPO)
    ex = parent.branch().run(f"open({path!r}, 'w').write('x')")
    assert ex.status is ExecStatus.ERROR
    assert not Path(path).exists()
    _parent_ok(parent)


def test_deletes_outside_the_workspace_fail(sb, parent):
    if not sb.isolation.bwrap:
        pytest.skip("bubblewrap not available: no filesystem isolation")
    victim = REPO / "setup.cfg"
    before = victim.read_bytes()
    ex = parent.branch().run(f"import os\nos.remove({str(victim)!r})")
    assert ex.status is ExecStatus.ERROR
    ex = parent.branch().run("import shutil\nshutil.rmtree('/etc')")
    assert ex.status is ExecStatus.ERROR
    assert victim.read_bytes() == before and Path("/etc/passwd").exists()
    _parent_ok(parent)


def test_memory_hog_hits_the_address_space_limit():
    with Sandbox(SandboxConfig(memory_limit_mb=1024, preload_modules=())) as box:
        root = box.open_root()
        root.run("z = 1")
        ex = root.branch().run("a = []\nwhile True:\n    a.append(' ' * 10**7)", timeout=60)
        assert ex.status is ExecStatus.MEMORY_LIMIT and ex.status.is_infrastructure
        assert "MemoryError" in ex.observation()
        assert root.run("z").result == "1"


def test_out_of_memory_while_reporting_a_cell_is_the_memory_limit_not_a_death():
    """Memory can run out after the cell's own code, in what reports it (IPython's bookkeeping, the traceback, the
    reply's JSON): the runtime answers with the reply it encoded at start-up, not by dying without a reason.
    Here the cell makes the reply's encoding fail as a full address space does."""
    with Sandbox(SandboxConfig(preload_modules=())) as box:
        root = box.open_root()
        root.run("z = 1")
        ex = root.branch().run("import json\ndef _full(*a, **k):\n    raise MemoryError()\njson.dumps = _full")
        assert ex.status is ExecStatus.MEMORY_LIMIT
        assert "MemoryError" in ex.observation()
        assert root.run("z").result == "1"


def test_fork_bomb_is_contained_while_another_sandbox_runs():
    """The bomb's sandbox has its own process budget: a neighbour sandbox (same host, same runtime uid) holding
    more live runtimes than that budget does not stop it from branching, and keeps branching and running cells
    while the bomb fills the budget. (With one RLIMIT_NPROC for the uid, the bomb's sandbox could not even
    branch: "runtime died during fork".)"""
    with Sandbox(SandboxConfig(max_processes=64, preload_modules=())) as box:
        budget = box.stats().process_budget
        if budget == "none":
            pytest.skip("no process limit holds here (root without bubblewrap and no pids cgroup)")
        # A shared rlimit cannot hold beside a neighbour bigger than the budget: then only a small one.
        size = 70 if budget == "cgroup" else 3
        with Sandbox(SandboxConfig(preload_modules=(), max_live_states=size + 5)) as neighbour:
            first = neighbour.open_root()
            first.run("n = 0")
            states = [first] + [first.branch() for _ in range(size - 1)]
            assert neighbour.stats().live_states == size
            root = box.open_root()
            root.run("z = 1")
            bomb = root.branch()
            done: list = []
            thread = threading.Thread(target=lambda: done.append(
                bomb.run("import os\nwhile True:\n    os.fork()", timeout=5)))
            thread.start()
            if budget == "cgroup":  # wait until the bomb has filled its budget, then work next door
                deadline = time.monotonic() + 5
                while (box._cgroup.current() or 0) < 48 and time.monotonic() < deadline and thread.is_alive():
                    time.sleep(0.05)
            neighbour_results = [state.branch().run("n + 1") for state in states[:3]]
            thread.join(timeout=60)
            assert not thread.is_alive()
            assert done[0].status in (ExecStatus.ERROR, ExecStatus.TIMEOUT)
            assert root.run("z").result == "1"
            if budget == "cgroup":
                assert [ex.result for ex in neighbour_results] == ["1", "1", "1"]
                assert box._cgroup.peak() in (None, *range(48, 65))  # the bomb met its own limit
            assert [state.run("n").result for state in states[:3]] == ["0", "0", "0"]
