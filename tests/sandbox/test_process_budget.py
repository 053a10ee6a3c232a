"""Each sandbox's own process budget: a pids cgroup where the host allows it, RLIMIT_NPROC otherwise."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxConfig
from sandbox.runtime.launcher import launch_argv
from sandbox.runtime.limits import CGROUP_ENV, PidsCgroup, ProcessBudget, pids_cgroup_parent


def _usable_parent() -> Path | None:
    parent = pids_cgroup_parent()
    if parent is None:
        return None
    try:
        PidsCgroup.create(parent, 8).remove()
    except OSError:
        return None
    return parent


PARENT = _usable_parent()
needs_cgroup = pytest.mark.skipif(PARENT is None, reason="no writable pids cgroup here (not root, or no controller)")


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _nproc_limit(state) -> str:
    return state.run("import resource\nresource.getrlimit(resource.RLIMIT_NPROC)[0]").result


@needs_cgroup
def test_sandbox_runs_in_its_own_pids_cgroup_removed_on_close():
    with Sandbox(SandboxConfig(max_processes=40, preload_modules=())) as box:
        assert box.stats().process_budget == "cgroup"
        group = box._cgroup
        assert group.path.parent == PARENT and group.path.name.startswith(f"jupiter-{os.getpid()}-")
        assert (group.path / "pids.max").read_text().strip() == "40"
        root = box.open_root()
        child = root.branch()
        pid = int(child.run("import os\nos.getpid()").result) if not box.isolation.bwrap else None
        members = group.pids()
        assert box._zygote.pid in members and len(members) >= 3  # zygote (+ bwrap), root, child
        if pid is not None:
            assert pid in members
        # The cgroup is the limit: no RLIMIT_NPROC (it would count every sandbox of the runtimes' uid).
        assert _nproc_limit(child) != "40"
    assert not group.path.exists()


def test_rlimit_is_the_fallback_and_says_so(monkeypatch):
    monkeypatch.setenv(CGROUP_ENV, "off")
    with Sandbox(SandboxConfig(max_processes=40, preload_modules=())) as box:
        budget = box.stats().process_budget
        assert box._cgroup is None
        assert budget == ("rlimit" if box.isolation.nproc_enforced else "none")
        if budget == "rlimit":
            assert _nproc_limit(box.open_root()) == "40"


def test_a_folder_that_is_not_a_cgroup_falls_back(monkeypatch, tmp_path):
    monkeypatch.setenv(CGROUP_ENV, str(tmp_path))
    with pytest.raises(OSError, match="not a cgroup"):
        PidsCgroup.create(tmp_path, 8)
    assert list(tmp_path.iterdir()) == []
    with Sandbox(SandboxConfig(max_processes=40, preload_modules=())) as box:
        assert box.stats().process_budget in ("rlimit", "none")


def test_no_process_limit_asked_means_none():
    with Sandbox(SandboxConfig(max_processes=None, preload_modules=())) as box:
        assert box.stats().process_budget == ProcessBudget.NONE.value and box._cgroup is None


@needs_cgroup
def test_groups_left_by_a_crashed_host_are_removed_at_the_next_start():
    stale = PARENT / f"jupiter-{_dead_pid()}-1"
    stale.mkdir()
    group = PidsCgroup(stale)
    # a runtime that outlived its host, joined as a zygote joins (the launcher's shell, then exec)
    leftover = subprocess.Popen(launch_argv(["sleep", "60"], procs_file=group.procs_file))
    try:
        deadline = time.monotonic() + 10  # the launcher joins in the child, after Popen has returned
        joined = False
        while time.monotonic() < deadline:
            if group.holds(leftover.pid):
                joined = True
                break
            if not stale.exists():
                # a sandbox starting in another test process (the suite runs in several) removed it first:
                # the very behaviour under test, reached by another start than ours
                break
            time.sleep(0.01)
        assert joined or not stale.exists()
        live = PidsCgroup.create(PARENT, 8)  # ours: its host (this process) is alive, so it stays
        try:
            with Sandbox(SandboxConfig(preload_modules=())) as box:
                assert box.stats().process_budget == "cgroup"
            assert not stale.exists() and live.path.exists()
            assert leftover.wait(timeout=10) == -9
        finally:
            live.remove()
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
        if stale.exists():
            PidsCgroup(stale).remove()


def test_pids_hierarchy_is_found_in_v2_then_v1(tmp_path):
    unified, pids = tmp_path / "unified", tmp_path / "pids"
    (unified / "user.slice").mkdir(parents=True)
    (pids / "box").mkdir(parents=True)
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        f"30 20 0:26 / {unified} rw,relatime shared:9 - cgroup2 cgroup2 rw\n"
        f"31 20 0:27 / {pids} rw,relatime shared:10 - cgroup cgroup rw,pids\n"
        f"32 20 0:28 / {tmp_path / 'cpu'} rw,relatime - cgroup cgroup rw,cpu\n")
    cgroups = tmp_path / "cgroup"
    cgroups.write_text("3:cpu:/\n2:pids:/box\n0::/user.slice\n")
    (unified / "user.slice" / "cgroup.controllers").write_text("cpu memory\n")
    assert pids_cgroup_parent(mountinfo, cgroups) == pids / "box"  # v2 has no pids controller: use v1
    (unified / "user.slice" / "cgroup.controllers").write_text("cpu memory pids\n")
    assert pids_cgroup_parent(mountinfo, cgroups) == unified / "user.slice"
    cgroups.write_text("3:cpu:/\n")
    assert pids_cgroup_parent(mountinfo, cgroups) is None


@needs_cgroup
def test_reaching_the_process_budget_evicts_idle_states_instead_of_killing_the_sandbox():
    """700 branches of one root with the default budget used to fail at branch ~509 with "runtime died during
    fork", and within seconds every state died. Now a fork that would pass the budget is refused by the runtime,
    the least recently used idle states are evicted, and the branch goes through."""
    with Sandbox(SandboxConfig(max_processes=24, max_live_states=200, preload_modules=())) as box:
        assert box.stats().process_budget == "cgroup"
        root = box.open_root()
        root.run("z = 7")
        children = [root.branch() for _ in range(40)]
        assert box.stats().evictions > 0 and box.stats().deaths == 0
        assert children[-1].run("z + 1").result == "8"
        assert children[0].run("z + 2").result == "9"  # evicted, rebuilt by replay
        assert root.run("z").result == "7"


@needs_cgroup
def test_a_budget_full_of_one_states_processes_refuses_a_branch_clearly():
    from sandbox import ProcessBudgetError

    with Sandbox(SandboxConfig(max_processes=16, preload_modules=(), timeout_s=30)) as box:
        busy = box.open_root()
        ex = busy.run("import subprocess\nprocs = []\ntry:\n    while True:\n"
                      "        procs.append(subprocess.Popen(['sleep', '306.25']))\nexcept OSError:\n    pass\n"
                      "len(procs) > 5")
        assert ex.result == "True"
        with pytest.raises(ProcessBudgetError, match="process budget"):
            busy.branch()  # nothing idle to evict: all of the budget is this state's own processes
        busy.close()  # its cgroup is killed: the budget is free again
        assert box.open_root().run("1 + 1").result == "2"
