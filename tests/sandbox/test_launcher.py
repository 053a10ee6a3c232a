"""Starting a runtime without forking the host (``sandbox.runtime.launcher``): what a preexec_fn did still happens."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from sandbox import Sandbox, SandboxConfig
from sandbox.runtime.launcher import launch_argv

LIGHT = SandboxConfig(preload_modules=(), timeout_s=60)
SERVER = Path(__file__).resolve().parents[2] / "sandbox" / "runtime" / "_server.py"
AUTOGROUP = Path("/proc/self/autogroup")
PRINT_PRIORITY = ("import os, pathlib\np = pathlib.Path('/proc/self/autogroup')\n"
                  "print(os.nice(0), '|', p.read_text().strip() if p.exists() else '')")


def _priority(stdout: str) -> tuple[int, int | None]:
    """(process niceness, autogroup niceness or None where no autogroup applies) from PRINT_PRIORITY's line."""
    nice, _, group = stdout.partition("|")
    group = group.strip()
    return int(nice), (int(group.rsplit(" ", 1)[-1]) if group else None)


def test_starting_a_sandbox_never_forks_the_host():
    """A preexec_fn makes subprocess fork() the whole host (copying its page tables with the GIL held: 30 ms for
    a 122 MB host) instead of vfork(); that fork runs the interpreter's at-fork hooks, so none may run."""
    forks = []
    os.register_at_fork(before=lambda: forks.append(1))
    with Sandbox(LIGHT) as box:
        child = box.open_root().branch()
        assert child.run("1 + 1").result == "2"
    assert forks == []


def test_the_zygote_runs_at_the_sandboxs_niceness_from_its_exec_on():
    """The process the host starts (bubblewrap, or the runtime itself) is niced before it runs, not once the
    runtime has started up and lowered itself."""
    with Sandbox(LIGHT.replace(nice=7)) as box:
        box.open_root()
        process = psutil.Process(box._zygote._proc.pid)
        assert process.name() in ("bwrap", "python", "python3", Path(sys.executable).name)  # sh exec'd away
        assert process.nice() >= 7


def test_launch_argv_raises_niceness_and_the_sessions_share_never_lowers_it():
    ours = AUTOGROUP.read_text() if AUTOGROUP.exists() else None
    command = [sys.executable, "-c", PRINT_PRIORITY]
    niced = subprocess.run(launch_argv(command, nice=6), capture_output=True, text=True, check=True,
                           start_new_session=True).stdout
    nice, group = _priority(niced)
    assert nice == max(6, os.nice(0))  # at least 6; a test run that is niced more already keeps its own
    if group is not None:  # None: a CPU cgroup other than the root one, where no autogroup applies
        assert group == 6
    plain = subprocess.run(launch_argv(command, nice=0), capture_output=True, text=True, check=True,
                           start_new_session=True).stdout
    assert _priority(plain)[0] == os.nice(0)
    # a caller already nicer than asked: the child keeps the caller's niceness ("at least", as before). On Linux
    # niceness is per thread: a thread of our own is niced, and starts the child.
    nicer: list[str] = []

    def from_a_nicer_thread() -> None:
        os.nice(max(0, 9 - os.nice(0)))
        nicer.append(subprocess.run(launch_argv(command, nice=3), capture_output=True, text=True, check=True,
                                    start_new_session=True).stdout)

    thread = threading.Thread(target=from_a_nicer_thread)
    thread.start()
    thread.join()
    assert _priority(nicer[0])[0] == max(9, os.nice(0))
    if ours is not None:
        assert AUTOGROUP.read_text() == ours  # the test's own session is untouched


def test_launch_argv_joins_the_cgroup_before_exec(tmp_path):
    """The shell writes its own pid into cgroup.procs, then execs: the pid written is the command's pid."""
    procs = tmp_path / "cgroup.procs"
    procs.write_text("")
    proc = subprocess.run(launch_argv([sys.executable, "-c", "import os; print(os.getpid())"], procs_file=procs),
                          capture_output=True, text=True, check=True)
    assert procs.read_text().split() == [proc.stdout.strip()]


def test_a_runtime_whose_host_is_gone_before_it_starts_exits():
    """Without bubblewrap the runtime sets itself to die with the host; if the host died before that, its parent
    is no longer the host and the runtime exits instead of waiting for a host that will never talk to it."""
    host_end, child_end = socket.socketpair()
    settings = {"fd": child_end.fileno(), "host_pid": os.getpid() + 1_000_000, "home": "/", "rlimits": {},
                "preload": [], "output_cap": 1000, "fault_dir": "/tmp"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, str(SERVER), json.dumps(settings)], pass_fds=(child_end.fileno(),),
                          capture_output=True, timeout=60)
    child_end.close()
    assert proc.returncode == 0 and time.monotonic() - started < 60
    host_end.settimeout(0)
    try:
        assert host_end.recv(1) == b""  # no hello: it never started serving
    except BlockingIOError:
        raise AssertionError("the runtime left its end of the socket open") from None
    finally:
        host_end.close()
