"""One state's cell cannot end the sandbox, reach another state's files, or leave processes behind it."""
from __future__ import annotations

import os
import signal
import threading
import time

import psutil
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


def _signals_contained(box) -> None:
    from sandbox import Guarantee

    if Guarantee.SIGNALS_CONTAINED not in box.guarantees:
        pytest.skip("no Landlock signal scoping here (Linux < 6.12): a kill-all cell reaches sibling states, which "
                    "come back by replay")


def test_a_kill_all_signal_reaches_only_its_own_state(box):
    """``os.kill(-1, SIGKILL)`` in one branch used to kill its sibling states too (one uid): they came back by
    replay, but a cell running there at that moment ended DIED. Now each state has a Landlock domain of its own:
    the signal reaches the branch's own processes only, and the sibling's cell finishes."""
    _signals_contained(box)
    root = box.open_root()
    root.run("import time\nx = 1")
    sibling = root.branch()
    sibling.run("y = 2")
    done = {}
    busy = threading.Thread(target=lambda: done.setdefault("ex", sibling.run("time.sleep(2)\nx + y")))
    busy.start()
    time.sleep(0.5)
    bomb = root.branch()
    ex = bomb.run("import os, signal, subprocess\np = subprocess.Popen(['sleep', '306.25'])\n"
                  "os.kill(-1, signal.SIGKILL)\np.wait()")
    busy.join(timeout=60)
    assert ex.status is ExecStatus.OK and ex.result == "-9"  # its own child was hit
    assert done["ex"].status is ExecStatus.OK and done["ex"].result == "3"
    assert root.run("x").result == "1"
    assert box.stats().revivals == 0 and box.stats().deaths == 0


def test_a_state_cannot_reach_a_siblings_files_through_proc_root(box):
    """A program a state runs (exec'd, so dumpable) could show that state's ``/tmp`` and workspace to another
    state through ``/proc/<pid>/root`` and ``/proc/<pid>/cwd``, which need ptrace access. Two things refuse it:
    each state's own user namespace (the kernel asks for CAP_SYS_PTRACE over the target's namespace), and each
    state's Landlock domain, which scopes ptrace access to the state and its branches."""
    _signals_contained(box)
    root = box.open_root()
    sibling = root.branch()
    pid = sibling.run("import subprocess\nopen('/tmp/secret.txt', 'w').write('s3cret')\n"
                      "open('mine.txt', 'w').write('mine')\np = subprocess.Popen(['sleep', '307.25'])\n"
                      "p.pid").result
    attacker = root.branch()
    ex = attacker.run(f"for path in ('/proc/{pid}/root/tmp/secret.txt', '/proc/{pid}/cwd/mine.txt'):\n"
                      "    try:\n        print(open(path).read())\n"
                      "    except OSError as exc:\n        print(type(exc).__name__)")
    assert "s3cret" not in ex.stdout and "mine" not in ex.stdout, ex.stdout
    assert ex.stdout.split() == ["PermissionError", "PermissionError"], ex.stdout
    sibling.close()
    assert _gone("307.25")


def test_a_dead_zygote_is_restarted_and_the_tree_goes_on(box):
    root = box.open_root()
    root.run("x = 5")
    child = root.branch()
    child.run("y = 6")
    os.killpg(box._zygote.pid, signal.SIGKILL)
    box._zygote._proc.wait(timeout=10)
    deadline = time.monotonic() + 10  # the states follow the zygote (parent-death signal, PID namespace)
    while child._slot.runtime.alive and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.run("x * y").result == "30"
    assert root.branch().run("x").result == "5"
    assert box.open_root().run("1").result == "1"
    assert box.stats().zygote_restarts == 1


def _isolated(box) -> None:
    if not box.isolation.bwrap:
        pytest.skip("bubblewrap not available: states share the host's view (see test_fallback_says_what_it_lacks)")


def test_a_state_cannot_reach_another_states_files(box, data_csv):
    """States used to share one writable ``states/`` folder and one uid: a cell listed it, rewrote the root's files
    and a sibling's. Now a cell finds no other workspace: the folder cannot be listed, names are not guessable,
    and other states' processes do not show their folders in /proc."""
    _isolated(box)
    root = box.open_root([data_csv])
    root.run("import shutil\nopen('mine.txt', 'w').write('root')\nshutil.copy('data.csv', 'copy.txt')")
    sibling = root.branch()
    sibling.run("open('mine.txt', 'w').write('sibling')")
    attacker = root.branch()
    ex = attacker.run(
        "import os\nbase = os.path.dirname(os.getcwd())\nnames = ['s000001', 's000002']\n"
        "try:\n    names += os.listdir(base)\nexcept OSError:\n    print('cannot list')\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    for link in ('cwd', 'root'):\n"
        "        try:\n            names.append(os.readlink(f'/proc/{pid}/{link}'))\n        except OSError:\n"
        "            pass\n"
        "hits = []\n"
        "for name in set(names) - {os.getcwd(), os.path.basename(os.getcwd()), '/'}:\n"
        "    for file in ('mine.txt', 'new.txt'):\n"
        "        try:\n"
        "            open(os.path.join(base, name, file), 'w').write('corrupt')\n"
        "            hits.append((name, file))\n"
        "        except OSError:\n"
        "            pass\n"
        "print('hits', hits)")
    assert "cannot list" in ex.stdout and "hits []" in ex.stdout, ex.stdout
    assert root.read_file("mine.txt") == b"root" and root.read_file("copy.txt") == data_csv.read_bytes()
    assert sibling.read_file("mine.txt") == b"sibling"
    assert not (root.workspace / "new.txt").exists() and not (sibling.workspace / "new.txt").exists()
    # the workspace itself works as before: its files are the state, copied to a branch
    assert attacker.run("open('mine.txt').read()").result == "'root'"


def test_tmp_and_shm_are_private_to_a_state(box):
    _isolated(box)
    root = box.open_root()
    root.run("open('/tmp/root.txt', 'w').write('r')\nopen('/dev/shm/root.bin', 'wb').write(b'r')")
    child = root.branch()
    sibling = root.branch()
    sibling.run("open('/tmp/sibling.txt', 'w').write('s')\nopen('/dev/shm/sibling.bin', 'wb').write(b's')")
    seen = child.run("import os\nsorted(os.listdir('/tmp')), sorted(os.listdir('/dev/shm'))").result
    # a branch inherits its parent's /tmp files (they are part of what the cells did), never a sibling's
    assert "root.txt" in seen and "sibling" not in seen
    assert "root.bin" not in seen  # shared memory files do not outlive their state's view


def test_home_is_a_states_own_and_passes_to_its_branches(box):
    """HOME (IPython's and matplotlib's settings) was one folder for all states: a cell's ``matplotlibrc`` changed
    every other state's plots. Now each state has a copy of its parent's."""
    _isolated(box)
    root = box.open_root()
    writer = root.branch()
    writer.run("import os\nos.makedirs(os.path.expanduser('~/.matplotlib'), exist_ok=True)\n"
               "open(os.path.expanduser('~/.matplotlib/matplotlibrc'), 'w').write('figure.dpi: 7')")
    probe = "import os\nos.path.exists(os.path.expanduser('~/.matplotlib/matplotlibrc'))"
    assert root.branch().run(probe).result == "False"
    assert root.run(probe).result == "False"
    assert writer.branch().run(probe).result == "True"
    assert not (box.layout.home / ".matplotlib" / "matplotlibrc").exists()


def _processes_running(marker: str) -> list[int]:
    """Processes (any user's) whose command line contains ``marker``."""
    return [p.pid for p in psutil.process_iter(["cmdline"]) if marker in " ".join(p.info["cmdline"] or ())]


def _started(marker: str, timeout_s: float = 10.0) -> list[int]:
    """The processes with ``marker`` on their command line once there are any: a cell's ``Popen`` returns while the
    child is still inside ``execve`` (vfork), when its command line reads empty."""
    deadline = time.monotonic() + timeout_s
    while not (found := _processes_running(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def _gone(marker: str, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while _processes_running(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _per_state_groups(box) -> None:
    if box._groups is None or not (box._groups.pids or box._groups.memory):
        pytest.skip("no cgroup per state here: a child in a session of its own may outlive its state until the "
                    "sandbox closes (see test_fallback_says_what_it_lacks)")


def test_a_child_in_its_own_session_ends_with_its_state(box):
    """The timeout and ``close()`` used to kill the state's process group only: a ``setsid`` child lived on
    until the whole search ended. Now the state's cgroup is killed."""
    _per_state_groups(box)
    root = box.open_root()
    root.run("import subprocess")
    spawn = "subprocess.Popen(['sleep', '{}'], start_new_session=True)\n"
    ex = root.branch().run(spawn.format("301.25") + "while True:\n    pass", timeout=2)
    assert ex.status is ExecStatus.TIMEOUT
    assert _gone("301.25")
    closing = root.branch()
    assert closing.run(spawn.format("302.25") + "1").status is ExecStatus.OK
    assert _started("302.25")
    closing.close()
    assert _gone("302.25")
    keeper = root.branch()  # a state that is not closed keeps its own background processes
    keeper.run(spawn.format("303.25") + "1")
    assert _started("303.25") and root.run("1 + 1").result == "2"
    keeper.close()
    assert _gone("303.25")


def test_runtimes_moved_into_a_states_group_are_not_killed_with_it(box):
    """A new state moves itself into its cgroups through ``tasks`` descriptors the host opened; a cell that rewrote
    its runtime's code could keep one and move the zygote or another state's runtime into that group (what the
    host does here), so that killing the group would kill them. The host moves them back instead."""
    _per_state_groups(box)
    root = box.open_root()
    root.run("x = 1")
    other = root.branch()
    other.run("y = 2")
    doomed = root.branch()
    assert doomed._slot.runtime.group.add(box._zygote.host_pid) and doomed._slot.runtime.group.add(other.runtime_pid)
    doomed.close()
    assert box._zygote.alive and other._slot.runtime.alive
    assert other.run("x + y").result == "3" and root.branch().run("x").result == "1"
    assert box.stats().revivals == 0 and box.stats().zygote_restarts == 0


def test_the_full_set_of_guarantees_holds_with_bubblewrap_as_root(box):
    from sandbox import Guarantee

    if not box.isolation.bwrap or os.geteuid() != 0:
        pytest.skip("bubblewrap as root is what gives every guarantee")
    missing = set(Guarantee) - box.guarantees
    if box._groups is None or box._groups.memory is None:
        missing -= {Guarantee.STATE_MEMORY}
    if box._groups is None or box._groups.cpu is None:
        missing -= {Guarantee.CPU_SHARE}
    assert not missing


def test_fallback_says_what_it_lacks(monkeypatch, caplog):
    """Without bubblewrap and cgroups (rlimits only) the sandbox names what does not hold, and it does not: a
    child in a session of its own outlives its state's close."""
    from sandbox import Guarantee

    monkeypatch.setenv("JUPITER_SANDBOX_CGROUP", "off")
    with caplog.at_level("WARNING", logger="sandbox.sandbox"):
        with Sandbox(SandboxConfig(isolation="none", preload_modules=())) as fallback:
            lacking = {Guarantee.HOST_HIDDEN, Guarantee.FILES_SEPARATED, Guarantee.PROCESSES_CONTAINED,
                       Guarantee.STATE_MEMORY, Guarantee.CPU_SHARE}
            if Guarantee.SIGNALS_CONTAINED not in fallback.guarantees:  # Landlock protects the host's uid too
                lacking.add(Guarantee.ZYGOTE_PROTECTED)
            assert not lacking & fallback.guarantees
            assert {Guarantee.HOST_SECRETS, Guarantee.HOST_READS, Guarantee.DISK_QUOTA} <= fallback.guarantees
            said = caplog.text
            assert "no bubblewrap" in said and "no usable cgroup" in said
            assert all(g.value in said for g in lacking)
            state = fallback.open_root()
            state.run("import subprocess\np = subprocess.Popen(['sleep', '304.25'], start_new_session=True)")
            pid = _started("304.25")
            state.close()
            time.sleep(0.2)
            assert _processes_running("304.25") == pid  # as stated: it outlived its state
            for leftover in pid:
                os.kill(leftover, signal.SIGKILL)


def test_cells_share_one_cpu_group(box):
    _per_state_groups(box)
    cpu = box._groups.cpu
    if cpu is None:
        pytest.skip("no cpu cgroup here")
    weight = (cpu / "cpu.weight") if (cpu / "cpu.weight").exists() else (cpu / "cpu.shares")
    assert int(weight.read_text()) in (100, 1024)
    state = box.open_root()
    state.run("import subprocess\np = subprocess.Popen(['sleep', '305.25'])")
    members = {int(p) for p in (cpu / "cgroup.procs").read_text().split()}
    assert set(_started("305.25")) <= members and state.runtime_pid in members
    state.close()


def test_per_state_cgroups_can_be_turned_off_and_the_guarantees_say_so():
    from sandbox import Guarantee

    with Sandbox(SandboxConfig(state_cgroups=False, preload_modules=())) as plain:
        assert not {Guarantee.PROCESSES_CONTAINED, Guarantee.STATE_MEMORY} & plain.guarantees
        state = plain.open_root()
        assert state._slot.runtime.group is None and state.branch().run("1 + 1").result == "2"
