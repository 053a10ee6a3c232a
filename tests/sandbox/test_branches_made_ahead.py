"""``State.prefetch``: branches started in the background are the ones ``branch()`` hands out, equal to a branch
made then; a state that runs or closes drops the ones not taken, and nothing they made outlives it."""
from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

from sandbox import Sandbox, SandboxConfig


def _wait_for(predicate, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def _value(state, expr: str) -> str:
    ex = state.run(expr)
    assert ex.ok, ex.observation()
    return ex.result


def test_branches_made_ahead_are_taken_and_equal_a_branch_made_now(sb: Sandbox, data_csv: Path):
    root = sb.open_root([data_csv])
    assert root.run("import pandas as pd\ndf = pd.read_csv('data.csv')\nopen('note.txt', 'w').write('kept')").ok
    before = sb.stats()
    root.prefetch(2)
    root.prefetch(2)  # asks for two in all, not four
    first, second = root.branch(), root.branch()
    after = sb.stats()
    assert after.branches_ahead - before.branches_ahead == 2
    assert after.branches_ahead_taken - before.branches_ahead_taken == 2
    for child in (first, second):
        assert _value(child, "int(df['a'].sum()), open('note.txt').read()") == "(9, 'kept')"
    assert first.run("df['a'] = 0").ok
    assert _value(second, "int(df['a'].sum())") == "9"  # independent of each other
    third = root.branch()  # none left ahead: made now
    assert sb.stats().branches_ahead_taken == after.branches_ahead_taken
    assert _value(third, "int(df['a'].sum())") == "9"
    for state in (first, second, third, root):
        state.close()


def test_a_cell_run_after_prefetch_is_seen_by_the_next_branch(sb: Sandbox):
    root = sb.open_root()
    assert root.run("x = 1").ok
    root.prefetch(3)
    assert root.run("x = 2").ok  # the three made ahead hold x == 1: dropped
    child = root.branch()
    assert _value(child, "x") == "2"
    for state in (child, root):
        state.close()


def test_branches_not_taken_are_closed_with_their_state():
    with Sandbox(SandboxConfig(timeout_s=60)) as box:
        root = box.open_root()
        assert root.run("y = 5").ok
        root.prefetch(3)
        taken = root.branch()
        assert _wait_for(lambda: box.stats().live_states == 4)  # root, the one taken, the two still ahead
        root.close()
        assert _wait_for(lambda: box.stats().live_states == 1)  # only the one taken
        assert _value(taken, "y") == "5"
        runtime = psutil.Process(taken.runtime_pid)
        taken.close()
        assert _wait_for(lambda: box.stats().live_states == 0)
        assert _wait_for(lambda: not runtime.is_running() or runtime.status() == psutil.STATUS_ZOMBIE)


def test_closing_the_sandbox_with_branches_on_their_way_leaves_no_process():
    box = Sandbox(SandboxConfig(timeout_s=60))
    root = box.open_root()
    assert root.run("z = list(range(10))").ok
    zygote = psutil.Process(box._zygote_pid())
    root.prefetch(4)
    box.close()
    assert _wait_for(lambda: not zygote.is_running() or zygote.status() == psutil.STATUS_ZOMBIE)
    assert box.stats().live_states == 0


def test_prefetch_rejects_a_negative_count(sb: Sandbox):
    root = sb.open_root()
    with pytest.raises(ValueError, match="n must be >= 0"):
        root.prefetch(-1)
    root.close()
