"""One memory budget for every sandbox of a process: states are evicted across sandboxes by least recent use, and
checking it reads no per-state smaps."""
from __future__ import annotations

import pytest

from sandbox import Sandbox, SandboxConfig
from sandbox.runtime import budget as budget_module
from sandbox.runtime.budget import STATE_PRIOR_BYTES, MemoryBudget, default_limit_bytes

MB = 1024 * 1024
GROW = "x = bytearray({mb} * 1024 * 1024)\nx[::4096] = b'1' * len(x[::4096])\nlen(x)"


def _config(**overrides) -> SandboxConfig:
    return SandboxConfig(preload_modules=(), timeout_s=60, **overrides)


def test_one_budget_evicts_the_least_recently_used_state_of_any_sandbox():
    """Each sandbox used to bound only itself, so many trees together ran the machine out of memory. Now a state
    that passes the shared budget in one sandbox evicts the least recently used idle state of another."""
    shared = MemoryBudget(1 << 50)  # no limit while the states are made
    with Sandbox(_config(), memory_budget=shared) as first, Sandbox(_config(), memory_budget=shared) as second:
        old = first.open_root()
        assert old.run(GROW.format(mb=60)).result == str(60 * MB)
        recent = first.open_root()
        assert recent.run(GROW.format(mb=60)).result == str(60 * MB)
        grower = second.open_root()
        grower.run("1")
        shared.limit_bytes = shared.usage_bytes() + 40 * MB
        assert grower.run(GROW.format(mb=60)).result == str(60 * MB)  # passes the budget
        grower.branch()  # the budget is checked when a state is made: the oldest idle state anywhere goes
        assert not old.live and recent.live and grower.live
        assert first.stats().evictions == 1 and second.stats().evictions == 0 and shared.evictions == 1
        assert shared.usage_bytes() <= shared.limit_bytes
        assert old.run("len(x)").result == str(60 * MB)  # an evicted state comes back by replay
        assert first.stats().replays >= 1


def test_checking_the_budget_reads_no_state_smaps_where_a_memory_cgroup_counts(monkeypatch):
    """Every branch used to read ``smaps_rollup`` of every live state under ``max_memory_mb`` (quadratic: 114 ms
    per branch at 300 states). With a memory cgroup the sandbox's usage is one counter."""
    with Sandbox(_config(max_memory_mb=100_000)) as box:
        if box._memory_group() is None:
            pytest.skip("no v1 memory cgroup here: the budgets count each state's USS after its cells")
        root = box.open_root()
        before = box.memory_in_use()
        root.run(GROW.format(mb=50))
        assert box.memory_in_use() - before > 40 * MB  # the counter follows what the cells hold

        def no_smaps(*_args):
            raise AssertionError("smaps read on the branch path")

        monkeypatch.setattr("sandbox.runtime.fork.uss_bytes", no_smaps)
        monkeypatch.setattr("sandbox.runtime.fork.ForkRuntime.memory_bytes", no_smaps)
        for _ in range(3):
            root.branch().run("1")


def test_without_cgroups_the_budget_counts_each_states_memory_after_its_cells(monkeypatch):
    monkeypatch.setenv("JUPITER_SANDBOX_CGROUP", "off")
    shared = MemoryBudget(1 << 50)
    with Sandbox(_config(isolation="none"), memory_budget=shared) as box:
        assert box._memory_group() is None
        old = box.open_root()
        old.run(GROW.format(mb=50))
        young = box.open_root()
        young.run("1")
        assert box.memory_in_use() > 50 * MB
        shared.limit_bytes = box.memory_in_use() - 10 * MB
        young.branch()
        assert not old.live and young.live and box.stats().evictions == 1


def test_the_default_budget_is_a_share_of_available_memory(monkeypatch):
    monkeypatch.delenv(budget_module.BUDGET_ENV, raising=False)
    monkeypatch.setattr(budget_module, "_meminfo_available", lambda: 24 * 1024 * MB)
    monkeypatch.setattr(budget_module, "_cgroup_room", lambda: None)
    assert default_limit_bytes() == 8 * 1024 * MB
    monkeypatch.setattr(budget_module, "_cgroup_room", lambda: 3 * 1024 * MB)  # a container's limit is smaller
    assert default_limit_bytes() == 1024 * MB
    monkeypatch.setenv(budget_module.BUDGET_ENV, "1500")
    assert default_limit_bytes() == 1500 * MB
    monkeypatch.setenv(budget_module.BUDGET_ENV, "lots")
    with pytest.raises(ValueError, match="JUPITER_SANDBOX_MEMORY_MB"):
        default_limit_bytes()


def test_sandboxes_join_the_process_budget_unless_told_not_to():
    with Sandbox(_config()) as joined, Sandbox(_config(shared_memory_budget=False)) as alone:
        members = budget_module.process_budget().sandboxes
        assert joined in members and alone not in members
    assert joined not in budget_module.process_budget().sandboxes


def test_the_budget_says_how_many_sandboxes_fit_from_what_its_members_measure():
    """A search admits trees by this figure: each sandbox's base (its zygote) plus the states it keeps, at the
    memory its live states take now on average, capped by the sandbox's own ``max_live_states``."""
    shared = MemoryBudget(1 << 50)
    assert shared.sandboxes_that_fit(10) is None  # nothing measured yet
    with Sandbox(_config(max_live_states=8), memory_budget=shared) as box:
        root = box.open_root()
        assert shared.sandboxes_that_fit(4) <= shared.limit_bytes // (box.memory_shape()[0] + 4 * STATE_PRIOR_BYTES)
        root.run(GROW.format(mb=80))  # bare roots say little: until enough states are measured, each counts the prior
        for _ in range(3):
            root.branch().run("1")
        base, held, live = box.memory_shape()
        assert live == 4 and base > 0 and held > 4 * STATE_PRIOR_BYTES
        one_at_four = base + 4 * held / live
        shared.limit_bytes = int(3 * one_at_four) + 1
        assert shared.sandboxes_that_fit(4) == 3
        assert shared.sandboxes_that_fit(2) > 3
        assert shared.sandboxes_that_fit(8) == shared.sandboxes_that_fit(1000) < 3  # a sandbox keeps at most 8
        shared.limit_bytes = 1
        assert shared.sandboxes_that_fit(4) == 1  # always at least one
