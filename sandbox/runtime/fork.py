"""Host side of the forking backend: the zygote process and handles of forked runtimes.

A runtime handle talks to one process over its own Unix socket (``protocol``). The host kills a busy runtime
by process group (it leads its own group), using the pid the kernel reported through ``SO_PASSCRED`` — the
runtime may live in a PID namespace where its own pid means nothing to us.
"""
from __future__ import annotations

import collections
import errno
import json
import logging
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.config import SandboxConfig
from sandbox.runtime import protocol
from sandbox.runtime.base import (
    ProcessBudgetFull,
    RawResult,
    RuntimeDied,
    RuntimeDiskLimit,
    RuntimeOutOfMemory,
    RuntimeTimeout,
    StartupError,
    runtime_env,
    uss_bytes,
)
from sandbox.runtime.isolation import IsolationPlan
from sandbox.runtime.launcher import launch_argv
from sandbox.runtime.limits import PidsCgroup, SandboxGroups, StateGroup
from sandbox.runtime.workspace import Layout

__all__ = ["ForkRuntime", "Zygote"]

log = logging.getLogger(__name__)
_SERVER = Path(__file__).resolve().parent / "_server.py"


class _ChildDiedStarting(RuntimeDied):
    """A forked runtime died before it greeted the host (``_request_fork``); the callers say why."""


def _kill_group(pid: int) -> None:
    for _ in range(20):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        except PermissionError:
            break
        time.sleep(0.002)
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")
    except (OSError, IndexError):
        return False


@dataclass(frozen=True)
class _Born:
    """What the host learns about a new runtime from its hello."""

    sock: socket.socket
    host_pid: int
    fault_fd: int | None
    joined: bool


def _request_fork(sock: socket.socket, request: dict[str, Any], deadline: float, workspace: Path,
                  join_fds: tuple[int, ...] = ()) -> _Born | None:
    """Ask the runtime on ``sock`` to fork. Returns the child's socket, pid and crash-report memfd (if it sent
    one) and whether it moved itself into its cgroups (``join_fds``: ``StateGroup.join_files``); None when the
    runtime refused (unsafe to fork). Raises RuntimeDied / protocol.FrameTimeout."""
    host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    host_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    try:
        try:
            # the workspace goes as an open folder: the child copies into it by descriptor, whatever its view
            folder = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                protocol.send_frame(sock, request, fds=(child_end.fileno(), folder, *join_fds))
            finally:
                os.close(folder)
        finally:
            child_end.close()
            for fd in join_fds:
                os.close(fd)
        try:
            reply, _, _ = protocol.recv_frame(sock, deadline)
        except protocol.ConnectionClosed as exc:  # the runtime asked to fork is gone
            raise RuntimeDied(f"runtime died during fork: {exc}") from exc
        if not reply.get("ok"):
            host_end.close()
            if reply.get("errno") in (errno.EAGAIN, errno.ENOMEM):
                raise ProcessBudgetFull(str(reply.get("reason")))
            log.info("runtime refused to fork: %s", reply.get("reason"))
            return None
        hello, fds, host_pid = protocol.recv_frame(host_end, deadline, want_fds=True, want_creds=True)
    except protocol.ConnectionClosed as exc:  # the parent forked; the child died before its hello
        host_end.close()
        raise _ChildDiedStarting(f"the new runtime died before its hello: {exc}") from exc
    except BaseException:
        host_end.close()
        raise
    fault_fd = fds[0] if fds else None
    for extra in fds[1:]:
        os.close(extra)
    if host_pid is None:
        host_end.close()
        if fault_fd is not None:
            os.close(fault_fd)
        raise RuntimeDied("forked runtime did not report credentials")
    return _Born(host_end, host_pid, fault_fd, bool(hello.get("joined")))


class ForkRuntime:
    """Handle of one live runtime process holding one notebook state. Not thread-safe (one State owns it)."""

    can_fork = True
    watches_disk = True

    def __init__(self, born: _Born, generation: int, zygote: Zygote, group: StateGroup | None) -> None:
        self.sock = born.sock
        self.fault_fd = born.fault_fd
        self.pid = born.host_pid
        self.group: StateGroup | None = zygote.settle(group, born)
        self.generation = generation
        self.zygote = zygote
        self.closed = False

    @property
    def alive(self) -> bool:
        return not self.closed and _pid_alive(self.pid)

    def run(self, code: str, timeout_s: float, over_quota: Callable[[], str | None] | None = None,
            check_every_s: float = 0.5) -> RawResult:
        """Run a cell. Raises RuntimeTimeout (the process was killed), RuntimeDied, or RuntimeDiskLimit when
        ``over_quota`` (called every ``check_every_s`` while the cell runs) returns a reason."""
        if self.closed:
            raise RuntimeDied("runtime already closed")
        deadline = time.monotonic() + timeout_s
        try:
            protocol.send_frame(self.sock, {"op": "run", "code": code})
            if over_quota is not None:
                while not protocol.readable(self.sock, min(deadline, time.monotonic() + check_every_s)):
                    if time.monotonic() >= deadline:
                        break
                    reason = over_quota()
                    if reason is not None:
                        self.kill()
                        raise RuntimeDiskLimit(reason)
            reply, _, _ = protocol.recv_frame(self.sock, deadline)
        except protocol.FrameTimeout as exc:
            self.kill()
            raise RuntimeTimeout(f"cell exceeded its {timeout_s:g} s time limit and was stopped") from exc
        except (protocol.ConnectionClosed, BrokenPipeError, ConnectionResetError) as exc:
            time.sleep(0.01)  # let a dying process finish its fault report
            note = self._death_note()
            out_of_memory = self.group is not None and self.group.oom_killed()
            self.kill()
            if out_of_memory:
                limit = self.zygote.config.state_memory_mb
                raise RuntimeOutOfMemory(f"the state passed its memory limit ({limit} MiB, counting its processes "
                                         "and its files in /tmp and /dev/shm) and was stopped") from exc
            raise RuntimeDied(note) from exc
        return RawResult(outputs=reply["outputs"], success=reply["success"],
                         execution_count=reply.get("execution_count"), duration_s=reply["duration_s"],
                         dropped_chars=int(reply.get("dropped_chars", 0)), ename=reply.get("ename"))

    def fork(self, workspace: Path, generation: int, timeout_s: float) -> ForkRuntime | None:
        """A new runtime holding a copy of this state, working in ``workspace`` (copied from ours).
        None when forking is unsafe (extra live threads)."""
        self.zygote.layout.make_state_dir(workspace)
        group, join = self.zygote.new_group(workspace)
        try:
            got = _request_fork(self.sock, {"op": "fork", "workspace": self.zygote.plan.inside(workspace),
                                            "copy": True},
                                time.monotonic() + timeout_s, workspace, join)
        except _ChildDiedStarting as exc:
            message = self.zygote.died_starting("a branch of a notebook state died before it started", group)
            if group is not None:
                group.close()
            raise RuntimeDied(message) from exc
        except (protocol.ConnectionClosed, BrokenPipeError, ConnectionResetError) as exc:
            if group is not None:
                group.close()
            note = self._death_note()
            self.kill()
            raise RuntimeDied(note) from exc
        except BaseException:
            if group is not None:
                group.close()
            raise
        if got is None:
            if group is not None:
                group.close()
            return None
        return ForkRuntime(got, generation, self.zygote, group)

    def _death_note(self) -> str:
        """Why the runtime died, from its crash report: read from the memfd it handed over at birth (never from a
        path a cell could have replaced with a link)."""
        note = "the runtime process died while running the cell (e.g. os._exit, a crash or a kill signal)"
        text = ""
        if self.fault_fd is not None:
            try:
                text = os.pread(self.fault_fd, 4096, 0).decode(errors="replace").strip()
            except OSError:
                text = ""
        if text:
            note += ": " + text.splitlines()[0]
        return note

    def memory_bytes(self) -> int:
        return uss_bytes(self.pid)

    def kill(self) -> None:
        """Kill the process group now (used for timeouts and eviction of a busy or broken runtime)."""
        if not self.closed:
            self.closed = True
            if self.zygote.groups is not None:
                self.zygote.groups.protected.discard(self.pid)
            _kill_group(self.pid)
            if self.group is not None:  # everything the state started, children in sessions of their own too
                self.group.close()
            self.sock.close()
            self._forget_fault_file()

    def close(self) -> None:
        """End the runtime. Its forked descendants live on (they are children of the zygote)."""
        self.kill()

    def _forget_fault_file(self) -> None:
        fd, self.fault_fd = self.fault_fd, None
        if fd is not None:
            os.close(fd)


#: Lines of the runtimes' stderr a zygote keeps for its error messages.
_STDERR_LINES = 40
#: What a state that fails before its hello writes first (``_server._fork``).
_FAILED_BEFORE_HELLO = "a new state failed before its hello:"


class Zygote:
    """The first runtime of a Sandbox: a clean shell (preloaded modules) that every root state is forked from.

    It is started from a dedicated long-lived thread, because ``PR_SET_PDEATHSIG`` fires when the *thread*
    that started a process exits, and the sandbox may be created from a short-lived worker thread.

    ``cgroup``: the sandbox's own pids cgroup; the zygote's launcher joins it before it execs the runtime (before
    anything can be started: ``sandbox.launcher``), so every runtime and every process a cell spawns is counted
    there. ``rlimits``: what the runtimes apply to themselves (default ``config.rlimits()``; without RLIMIT_NPROC
    when the cgroup holds).
    """

    def __init__(self, config: SandboxConfig, layout: Layout, plan: IsolationPlan,
                 cgroup: PidsCgroup | None = None, rlimits: dict[str, int | None] | None = None,
                 groups: SandboxGroups | None = None) -> None:
        self.config = config
        self.layout = layout
        self.plan = plan
        self.cgroup = cgroup
        self.groups = groups
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._started = threading.Event()
        self._proc: subprocess.Popen[bytes] | None = None
        self._error: BaseException | None = None
        # the last lines the zygote and the states forked from it wrote to stderr (they share it), read all the
        # time: a state that dies before its hello is reported with them (``died_starting``), and a full pipe
        # can never block a runtime
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._stderr_done = threading.Event()
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock = host_end
        settings = {
            "fd": child_end.fileno(), "output_cap": config.max_output_chars, "home": plan.inside(layout.home),
            "rlimits": config.rlimits() if rlimits is None else rlimits, "uid": plan.uid,
            "preload": list(config.preload_modules), "single_fork": plan.bwrap, "nice": config.nice,
            # each state's own /tmp and /dev/shm (``_server._enter_own_view``): bubblewrap's layout is needed
            "separate_states": plan.bwrap, "mount": None if plan.mount is None else str(plan.mount),
            "tmp_mb": config.tmp_size_mb, "shm_mb": config.shm_size_mb,
            # without bubblewrap the runtime is our child: it checks that we are still there once it is set to
            # die with us (bwrap --die-with-parent does both otherwise)
            "host_pid": None if plan.bwrap else os.getpid(),
            # each state its own Landlock domain: its signals (kill -1) reach its own processes and branches only
            "scope_signals": True,
        }
        self._cmd = [*plan.prefix, config.python, str(_SERVER), json.dumps(settings)]
        self._child_end = child_end
        self._thread = threading.Thread(target=self._own_process, name="sandbox-zygote", daemon=True)
        self._thread.start()
        self._started.wait()
        child_end.close()
        if self._error is not None:
            raise StartupError(f"cannot start the sandbox runtime ({self._cmd[0]}): {self._error}")
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        try:
            hello, _, host_pid = protocol.recv_frame(self.sock, time.monotonic() + config.startup_timeout_s,
                                                     want_creds=True)
        except (protocol.ConnectionClosed, protocol.FrameTimeout) as exc:
            detail = self._stderr_after_close()
            raise StartupError(f"sandbox runtime failed to start with {config.python} "
                               f"(isolation={'bwrap' if plan.bwrap else 'none'}): {exc}; stderr: {detail}") from exc
        if "error" in hello:
            self.close()
            raise StartupError(f"sandbox runtime self-check failed: {hello['error']} — is IPython installed for "
                               f"{config.python}?\n{hello.get('traceback', '')}")
        check = hello["self_check"]
        result = next((o for o in check["outputs"] if o["output_type"] == "execute_result"), None)
        if result is None or result["data"].get("text/plain") != "2":
            self.close()
            raise StartupError(f"sandbox runtime self-check `1+1` did not give 2: {check['outputs']}")
        self.host_pid = host_pid if host_pid is not None else self.pid  # the runtime itself (inside bwrap)
        if groups is not None and host_pid is not None:  # never killed with a state's group (StateGroup.kill)
            groups.protected.update(p for p in (self.pid, host_pid, _parent_of(host_pid)) if p is not None)

    def _own_process(self) -> None:
        cgroup = self.cgroup
        nice = self.config.nice

        # No preexec_fn: it would make subprocess fork the whole host (``sandbox.runtime.launcher`` says why)
        if self.groups is not None:
            procs = self.groups.procs_files
        else:
            procs = [cgroup.procs_file] if cgroup is not None else []
        argv = launch_argv(self._cmd, procs_file=procs, nice=nice)
        try:
            self._proc = subprocess.Popen(argv, pass_fds=(self._child_end.fileno(),),
                                          env=runtime_env(self.layout, self.plan, self.config.huge_pages,
                                                          self.config.env),
                                          stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          start_new_session=True)
        except OSError as exc:
            self._error = exc
        finally:
            self._started.set()
        if self._proc is not None:
            self._read_stderr(self._proc)
            self._stop.wait()

    def _read_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        """Keep the last lines of the runtimes' stderr, each logged at debug level (the run's log has them)."""
        try:
            assert proc.stderr is not None
            for raw in proc.stderr:
                line = raw.decode(errors="replace").rstrip()
                if line:
                    self._stderr_tail.append(line)
                    log.debug("sandbox runtime stderr: %s", line)
        except (OSError, ValueError):
            pass  # closed under us (close())
        finally:
            self._stderr_done.set()

    def stderr_tail(self, lines: int = _STDERR_LINES) -> list[str]:
        """The last ``lines`` lines the runtimes of this sandbox wrote to stderr."""
        return list(self._stderr_tail)[-lines:]

    @property
    def isolation(self) -> str:
        """The isolation its runtimes start under, in words (for errors and logs)."""
        return self.plan.describe()

    def died_starting(self, what: str, group: StateGroup | None = None) -> str:
        """One line saying why a runtime that never sent its hello is gone, the full stderr tail logged."""
        time.sleep(0.05)  # let its last words reach the reader
        tail = self.stderr_tail()
        out_of_memory = group is not None and group.oom_killed()
        # a state that failed reports its traceback as one line (``_server._report``): its exception says why
        failed = [line for line in tail if _FAILED_BEFORE_HELLO in line]
        if out_of_memory:
            reason = f"killed for passing its memory limit ({self.config.state_memory_mb} MiB) while starting"
        elif failed:
            reason = failed[-1].rsplit(" | ", 1)[-1].strip()
        else:
            reason = f"its last stderr line: {tail[-1]}" if tail else "it wrote nothing to stderr"
        if tail:
            log.warning("%s; isolation %s; the runtimes' last stderr lines:\n%s", what, self.isolation,
                        "\n".join(tail))
        return f"{what} (isolation: {self.isolation}): {reason}; `jupiter doctor` checks this machine's isolation"

    def _stderr_after_close(self) -> str:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
        self._stderr_done.wait(timeout=5)
        text = "\n".join(self.stderr_tail())[-4000:]
        self.close()
        return text.strip() or "(empty)"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self.sock.fileno() != -1

    def new_group(self, workspace: Path) -> tuple[StateGroup | None, tuple[int, ...]]:
        """The cgroup of a state about to be forked, and the descriptors it moves itself in with (before it runs
        any cell: what it starts is counted and killed with it). ``(None, ())`` where the host has no usable
        cgroup."""
        if self.groups is None:
            return None, ()
        group = self.groups.new_state(workspace.name)
        return group, (() if group is None else tuple(group.join_files()))

    def settle(self, group: StateGroup | None, born: _Born) -> StateGroup | None:
        """Check that a new state is in its group (it moves itself; a state whose runtime a cell rewrote might
        not), else move it from here; None where that fails too."""
        if group is None or self.groups is None:  # a group comes from self.groups (new_group)
            return None
        if not (born.joined and group.holds(born.host_pid)) and not group.add(born.host_pid):
            group.close()
            return None
        self.groups.protected.add(born.host_pid)
        return group

    def spawn(self, workspace: Path, generation: int) -> ForkRuntime:
        """A fresh notebook state (a fork of the clean shell) working in the existing folder ``workspace``."""
        group, join = self.new_group(workspace)
        try:
            with self._lock:
                try:
                    got = _request_fork(self.sock, {"op": "fork", "workspace": self.plan.inside(workspace),
                                                    "copy": False},
                                        time.monotonic() + self.config.startup_timeout_s, workspace, join)
                except (BrokenPipeError, ConnectionResetError) as exc:
                    raise RuntimeDied(f"the sandbox runtime is gone: {exc}") from exc
                except _ChildDiedStarting as exc:
                    raise RuntimeDied(self.died_starting("a new notebook state died before it started", group)) \
                        from exc
            if got is None:
                raise StartupError("the zygote refused to fork (it has extra threads)")
        except BaseException:
            if group is not None:
                group.close()
            raise
        return ForkRuntime(got, generation, self, group)

    def close(self) -> None:
        """End the zygote; every runtime forked from it dies with it (PDEATHSIG, PID namespace)."""
        try:
            self.sock.close()
        finally:
            proc = self._proc
            if proc is not None and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    proc.kill()
                proc.wait(timeout=30)
            # the reader thread sees the end of the pipe once every runtime holding it is gone; closing the file
            # under a blocked read would wait on its lock
            if proc is not None and proc.stderr is not None and not proc.stderr.closed \
                    and self._stderr_done.wait(timeout=2):
                proc.stderr.close()
            self._stop.set()
            self._thread.join(timeout=5)
