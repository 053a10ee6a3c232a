"""Process lifecycle: no leaks, no orphans or zombies, snapshot budget with replay, start-up self-check."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from sandbox import ExecStatus, Sandbox, SandboxConfig, StartupError

LIGHT = SandboxConfig(preload_modules=(), timeout_s=60)


def _descendants() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _wait_gone(pids: set[int], seconds: float = 10.0) -> set[int]:
    deadline = time.monotonic() + seconds
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if _running(p)}
        time.sleep(0.05)
    return alive


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (not a zombie); a process that ends between the checks is gone, not an error."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, FileNotFoundError):  # psutil can let the vanished /proc file's error through
        return False


def test_state_cycles_return_fds_and_processes_to_baseline():
    """1,000 runtime starts and stops (500 roots, each branched once) leave no fd, process or folder behind."""
    with Sandbox(LIGHT) as box:
        warm = box.open_root()
        warm.run("1")
        warm.close()
        fds, procs = _fds(), _descendants()
        for i in range(500):
            state = box.open_root()
            child = state.branch()
            assert child.run(f"{i} + 1").result == str(i + 1)
            child.close()
            state.close()
        assert _wait_gone(_descendants() - procs) == set()
        assert _fds() == fds
        assert list(box.layout.states.iterdir()) == []


def test_sandbox_cycles_leave_nothing_behind():
    fds, procs = _fds(), _descendants()
    roots = []
    for _ in range(5):
        with Sandbox(LIGHT) as box:
            state = box.open_root()
            state.branch().run("x = 1")
            roots.append(box.layout.root)
    assert _wait_gone(_descendants() - procs) == set()
    assert _fds() == fds
    assert not any(Path(r).exists() for r in roots)


def test_reset_ends_the_trees_states_and_files_and_keeps_the_zygote(tmp_path):
    """A reset sandbox serves the next tree from the same zygote; nothing of the last tree is left to see."""
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text("a\n1\n")
    second.write_text("b\n2\n")
    with Sandbox(LIGHT) as box:
        zygote = box._zygote_pid()
        root = box.open_root([first])
        child = root.branch()
        child.run("x = 41\nopen('made.txt', 'w').write('old tree')")
        runtimes = {s.runtime_pid for s in (root, child)}
        assert box.reset() is True
        assert root.closed and child.closed
        assert _wait_gone(runtimes) == set()
        assert os.listdir(box.layout.inputs) == [] and os.listdir(box.layout.states) == []
        assert box.stats().live_states == 0 and box.stats().disk_bytes == 0
        fresh = box.open_root([second]).branch()
        seen = fresh.run("import os\nprint(sorted(os.listdir('.')), 'x' in dir())")
        assert seen.ok and seen.stdout.strip() == "['second.csv'] False"
        assert box._zygote_pid() == zygote and box.stats().zygote_restarts == 0
    assert box.reset() is False  # closed: the caller makes a new one


def test_close_kills_every_runtime_and_reaps_them():
    box = Sandbox(LIGHT)
    root = box.open_root()
    kids = [root.branch() for _ in range(3)]
    kids[0].run("import subprocess; p = subprocess.Popen(['sleep', '600'])")
    pids = {s.runtime_pid for s in [root, *kids]}
    pids |= {p.pid for pid in pids for p in psutil.Process(pid).children(recursive=True)}
    box.close()
    assert _wait_gone(pids) == set()
    box.close()  # idempotent


def test_closing_a_parent_keeps_its_children_alive():
    with Sandbox(LIGHT) as box:
        root = box.open_root()
        root.run("x = 3")
        child = root.branch()
        root.close()
        assert child.run("x * 2").result == "6"
        assert child.live


@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_runtimes_die_when_the_host_is_killed(tmp_path, isolation):
    """With bubblewrap, ``bwrap --die-with-parent``; without, the runtime's own parent-death signal."""
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
        from sandbox import Sandbox, SandboxConfig
        box = Sandbox(SandboxConfig(preload_modules=(), root_dir={str(tmp_path / 'sb')!r}, isolation={isolation!r}))
        root = box.open_root()
        kids = [root.branch() for _ in range(2)]
        print(" ".join(str(s.runtime_pid) for s in [root, *kids]), flush=True)
        time.sleep(600)
    """)
    host = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        pids = {int(p) for p in host.stdout.readline().split()}
        assert len(pids) == 3 and all(psutil.pid_exists(p) for p in pids)
    finally:
        host.kill()
        host.wait()
        host.stdout.close()
    assert _wait_gone(pids) == set()


def test_lru_eviction_and_transparent_replay():
    with Sandbox(SandboxConfig(preload_modules=(), max_live_states=3)) as box:
        root = box.open_root()
        root.run("import random\nvals = [random.random()]\nopen('f.txt', 'w').write('root')")
        chain = [root]
        for depth in range(5):
            state = chain[-1].branch()
            state.run(f"vals.append({depth})")
            chain.append(state)
        stats = box.stats()
        assert stats.live_states <= 3 and stats.evictions >= 3
        evicted = [s for s in chain if not s.live]
        assert root in evicted
        generation = root.generation
        # Replay rebuilds the root from its recorded cells: a new generation, same variables and files.
        assert root.run("len(vals)").result == "1"
        assert root.generation != generation
        assert root.read_file("f.txt") == b"root"
        assert chain[3].run("vals[1:]").result == "[0, 1, 2]"
        branched = chain[2].branch()
        assert branched.run("vals[1:]").result == "[0, 1]"
        assert box.stats().replays >= 2


def test_a_restored_state_runs_nothing_until_used_then_holds_its_cells():
    """``State.restore``: how a resumed search gets its leaves' states back (no process until first use)."""
    with Sandbox(LIGHT) as box:
        root = box.open_root()
        root.run("base = 20")
        before = box.stats()
        restored = root.restore(["x = base + 1", "open('note.txt', 'w').write(str(x))", "1 / 0"])
        assert not restored.live and restored.depth == 4
        assert box.stats().runs == before.runs and box.stats().replays == before.replays
        child = restored.branch()  # rebuilt from a fork of the root; the failing cell is replayed, not fatal
        assert restored.live and child.run("x * 2").result == "42"
        assert child.read_file("note.txt") == b"21"
        assert box.stats().replays == before.replays + 1 and box.stats().replayed_cells == before.replayed_cells + 3
        assert root.run("'x' in dir()").result == "False"  # the parent is untouched
        unused = root.restore(["y = 1"])
        unused.close()  # closing one never used is fine
        with pytest.raises(TypeError, match="cells must be str"):
            root.restore([b"x = 1"])


def test_memory_budget_evicts_states():
    with Sandbox(SandboxConfig(preload_modules=(), max_memory_mb=120)) as box:
        root = box.open_root()
        states = []
        for _ in range(4):
            s = root.branch()
            assert s.run("blob = bytearray(50 * 1024 * 1024)").status is ExecStatus.OK
            states.append(s)
        assert box.stats().evictions >= 1
        assert box.live_memory_bytes() < 200 * 1024 * 1024
        assert states[0].run("len(blob)").result == str(50 * 1024 * 1024)


def test_self_check_names_the_missing_interpreter_or_kernel(tmp_path):
    with pytest.raises(StartupError, match="nonexistent"):
        Sandbox(SandboxConfig(python=str(tmp_path / "nonexistent" / "python")))
    with pytest.raises(StartupError, match="no-such-kernel"):
        Sandbox(SandboxConfig(backend="kernel", kernel_name="no-such-kernel"))


AUTOGROUP = Path("/proc/self/autogroup")


def _autogroup_nice(text: str) -> int | None:
    """The niceness in "/autogroup-123 nice 7", or None where the file reads empty: the kernel prints nothing for
    a process in a CPU cgroup other than the root one (CI runners, containers), which is not scheduled by
    autogroup at all, so only its process niceness counts there."""
    text = text.strip()
    return int(text.rsplit(" ", 1)[-1]) if text else None


def test_nice_lowers_the_cells_priority_as_processes_and_as_a_session():
    """Where the kernel schedules sessions as groups (sched_autogroup), a sandbox's own session gets a fair share
    whatever its processes' niceness: 16 sandboxes would leave a service's API 1/18 of the CPU. Bubblewrap
    starts one more session inside, so the state server sets that one's share too."""
    ours = AUTOGROUP.read_text() if AUTOGROUP.exists() else None
    with Sandbox(LIGHT.replace(nice=7)) as box:
        child = box.open_root().branch()
        out = child.run("import os, pathlib\np = pathlib.Path('/proc/self/autogroup')\n"
                        "print(os.nice(0), p.read_text().strip() if p.exists() else '-')").stdout.split(" ", 1)
    assert int(out[0]) >= 7
    if AUTOGROUP.exists() and _autogroup_nice(out[1]) is not None:
        assert _autogroup_nice(out[1]) == 7
        assert AUTOGROUP.read_text() == ours  # the test's own session is untouched


def test_lowering_priority_never_touches_the_callers_session():
    """Only a session that holds nothing but the sandbox gets its share lowered: a process that did not start
    its own session lowers its own niceness only."""
    code = ("from sandbox.runtime.limits import lower_priority; import os, pathlib\nlower_priority(5)\n"
            "p = pathlib.Path('/proc/self/autogroup')\nprint(os.nice(0), p.read_text().strip() if p.exists() else '-')")
    shared = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).resolve().parents[2]).stdout.split(" ", 1)
    own = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2], start_new_session=True).stdout.split(" ", 1)
    assert int(shared[0]) >= 5 and int(own[0]) >= 5
    if AUTOGROUP.exists():
        assert _autogroup_nice(shared[1]) == _autogroup_nice(AUTOGROUP.read_text())
        assert _autogroup_nice(own[1]) in (5, None)  # None: in a CPU cgroup, no autogroup applies
