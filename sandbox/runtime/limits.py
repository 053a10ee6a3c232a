"""Resource limits of runtimes: rlimits put on the current process, and each sandbox's process budget.

One place for both backends: the fork runtime (``_server.py``, which loads this file by path because it must not
import the package) applies the rlimits at start, the kernel backend between fork and exec of each kernel.
Standard library only. No ``from __future__ import annotations``: ``_server`` loads this file without
registering it in ``sys.modules``, where ``dataclasses`` cannot read string annotations (forward references are
quoted instead).

Process budget — why a cgroup: ``RLIMIT_NPROC`` counts every process of the runtime's *user*, and every
sandbox on a host drops to the same uid (65534), so one busy sandbox (or a fork bomb in it) used up the budget
of all the others ("runtime died during fork" in an unrelated search). Where the host lets us (root, a ``pids``
controller in cgroup v2 or v1), each sandbox gets its own ``pids`` cgroup, ``jupiter-<host pid>-<n>`` under the
host's current cgroup (or under ``$JUPITER_SANDBOX_CGROUP``), with ``pids.max = max_processes``; its zygote is
moved in before it starts, so every runtime forked from it and everything a cell spawns is counted there and
nowhere else. ``RLIMIT_NPROC`` is then left unset. Elsewhere the rlimit is the fallback. Groups are removed on
close; groups left by a host that crashed are removed when the next sandbox starts.
"""
import enum
import errno
import itertools
import logging
import os
import re
import resource
import signal
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("sandbox.runtime.limits")

#: ``SandboxConfig.rlimits()`` names -> the ``setrlimit`` resources.
RLIMITS = {
    "as": resource.RLIMIT_AS,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "cpu": resource.RLIMIT_CPU,
}

#: ``$JUPITER_SANDBOX_CGROUP``: a cgroup directory to create the sandboxes' groups under, or ``off``.
CGROUP_ENV = "JUPITER_SANDBOX_CGROUP"
_GROUP_NAME = re.compile(r"^jupiter-(\d+)-(\d+)$")
_group_numbers = itertools.count(1)  # only makes names unique within this host process


def lower_priority(nice: int, own_session: bool = False) -> None:
    """Run at niceness ``nice`` at least, as a process and as a session.

    Why both: where the kernel groups the scheduling by session (``sched_autogroup``, on by default on many
    distributions), a runtime that starts its own session gets a fair share of the CPU as a whole, whatever
    the niceness of its processes: a service running 16 sandboxes would give its API a 1/18 share. The
    session's niceness is set through ``/proc/self/autogroup`` where that exists, and only in a session that
    holds nothing but the sandbox: by a session leader (a runtime started with a session of its own), or where
    the caller says so (``own_session``: the state server, whose launcher started it in a new session)."""
    if nice <= 0:
        return
    current = os.nice(0)
    if nice > current:
        os.nice(nice - current)
    if not own_session and os.getsid(0) != os.getpid():
        return  # not a session of its own: its session's share is its parent's to set
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(nice))
    except OSError:
        pass  # no autogroup scheduling here: the process niceness is what counts


def apply_limits(rlimits: Mapping[str, int | None], nice: int = 0) -> None:
    """Set each named limit (None: unlimited), run at niceness ``nice`` at least (``lower_priority``), and
    ignore SIGXFSZ, so that a too-large file is an OSError in the cell rather than the death of the process.
    All survive exec."""
    lower_priority(nice)
    for name, value in rlimits.items():
        if value is not None:
            resource.setrlimit(RLIMITS[name], (int(value), int(value)))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


class ProcessBudget(str, enum.Enum):
    """Which process limit holds for a sandbox's runtimes (``Sandbox.stats().process_budget``).

    CGROUP: ``pids.max`` of the sandbox's own cgroup (counts only this sandbox's processes).
    RLIMIT: ``RLIMIT_NPROC`` (counts every process of the runtimes' uid, shared with other sandboxes).
    NONE: no process limit (root without a uid drop and no usable cgroup, or ``max_processes=None``).
    """

    CGROUP = "cgroup"
    RLIMIT = "rlimit"
    NONE = "none"


def _pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def pids_cgroup_parent(mountinfo: str = "/proc/self/mountinfo", cgroup_file: str = "/proc/self/cgroup") -> Path | None:
    """The directory of this process's cgroup in a hierarchy that has the ``pids`` controller, or None.

    cgroup v2 (unified) is preferred when ``pids`` is available there; on hybrid hosts ``pids`` is often a v1
    hierarchy of its own (``/sys/fs/cgroup/pids``), which works the same for our purpose.
    """
    return cgroup_parent("pids", mountinfo, cgroup_file)


def cgroup_parent(controller: str, mountinfo: str = "/proc/self/mountinfo",
                  cgroup_file: str = "/proc/self/cgroup") -> Path | None:
    """The directory of this process's cgroup in a hierarchy that has ``controller`` (v2 first, then v1), or
    None."""
    try:
        mounts = Path(mountinfo).read_text().splitlines()
        groups = Path(cgroup_file).read_text().splitlines()
    except OSError:
        return None
    v2_path: str | None = None
    v1_path: str | None = None
    for line in groups:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2_path = parts[2]
        elif controller in parts[1].split(","):
            v1_path = parts[2]
    found: dict[str, Path] = {}
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mountpoint, fstype, options = fields[3], fields[4], tail[0], tail[2].split(",")
        if fstype == "cgroup2" and v2_path is not None:
            found.setdefault("v2", _inside(mountpoint, root, v2_path))
        elif fstype == "cgroup" and controller in options and v1_path is not None:
            found.setdefault("v1", _inside(mountpoint, root, v1_path))
    v2 = found.get("v2")
    if v2 is not None:
        try:
            if controller in (v2 / "cgroup.controllers").read_text().split():
                return v2
        except OSError:
            pass
    return found.get("v1")


def _inside(mountpoint: str, mount_root: str, path: str) -> Path:
    """Where cgroup ``path`` appears under a mount of the hierarchy's ``mount_root``."""
    rel = os.path.relpath(path, mount_root) if path.startswith(mount_root) else path.lstrip("/")
    return Path(mountpoint) / ("" if rel == "." else rel)


def _procs(path: Path) -> list[int]:
    """Process ids in the cgroup at ``path`` now (host pid namespace); empty when unreadable."""
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_all(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@dataclass(frozen=True)
class PidsCgroup:
    """One sandbox's ``pids`` cgroup: a directory in the cgroup file system (created and removed by us)."""

    path: Path

    @classmethod
    def create(cls, parent: str | Path, max_pids: int) -> "PidsCgroup":
        """Create ``jupiter-<our pid>-<n>`` under ``parent`` with ``pids.max = max_pids`` (after removing groups
        of hosts that died). Raises OSError when the host does not let us (not root, read-only, no controller)."""
        parent = Path(parent)
        remove_stale_groups(parent)
        if (parent / "cgroup.subtree_control").is_file():  # v2: the controller must be on for children
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if "pids" not in enabled:
                (parent / "cgroup.subtree_control").write_text("+pids")
        while True:
            path = parent / f"jupiter-{os.getpid()}-{next(_group_numbers)}"
            try:
                path.mkdir()
                break
            except FileExistsError:  # left by an earlier process with our pid (pid reuse): next number
                continue
        group = cls(path)
        try:
            if not (path / "pids.max").is_file():  # the kernel makes it in a pids cgroup; a plain folder has none
                raise OSError(errno.ENOTSUP, f"{parent} is not a cgroup with the pids controller")
            (path / "pids.max").write_text(str(int(max_pids)))
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
            raise
        return group

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        """Process ids in the group now (host pid namespace)."""
        return _procs(self.path)

    def holds(self, pid: int) -> bool:
        return pid in self.pids()

    def _read(self, name: str) -> int | None:
        try:
            value = (self.path / name).read_text().strip()
        except OSError:
            return None
        return int(value) if value.isdigit() else None

    def current(self) -> int | None:
        """Processes (and threads) counted now, None if unreadable."""
        return self._read("pids.current")

    def peak(self) -> int | None:
        """Most processes counted at once (``pids.peak``; None where the kernel has no such file)."""
        return self._read("pids.peak")

    def remove(self, timeout_s: float = 5.0) -> bool:
        """Kill what is left in the group (and in the groups of its states) and remove it; True when it is gone.
        Idempotent."""
        deadline = time.monotonic() + timeout_s
        try:
            children = [p for p in self.path.iterdir() if p.is_dir()]
        except OSError:
            children = []
        for child in children:
            PidsCgroup(child).remove(timeout_s=max(0.1, deadline - time.monotonic()))
        while True:
            _kill_all(self.pids())
            try:
                self.path.rmdir()
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                    log.warning("cannot remove the sandbox cgroup %s: %s", self.path, exc)
                    return False
            time.sleep(0.01)  # killed processes leave the group once they are reaped


def remove_stale_groups(parent: str | Path) -> int:
    """Remove ``jupiter-<pid>-<n>`` groups under ``parent`` whose host process is gone (it crashed before
    closing its sandboxes); returns how many were removed. Groups of live hosts are left alone."""
    removed = 0
    try:
        entries = list(Path(parent).iterdir())
    except OSError:
        return 0
    for entry in entries:
        match = _GROUP_NAME.match(entry.name)
        if match is None or not entry.is_dir() or _pid_alive(int(match.group(1))):
            continue
        if PidsCgroup(entry).remove(timeout_s=1.0):
            removed += 1
            log.info("removed the stale sandbox cgroup %s", entry)
    return removed


def open_process_budget(max_processes: int | None,
                        nproc_enforced: bool) -> tuple[ProcessBudget, PidsCgroup | None]:
    """Decide a new sandbox's process budget: ``(ProcessBudget, PidsCgroup | None)``.

    ``nproc_enforced``: whether RLIMIT_NPROC would hold for the runtimes (it does not for root).
    """
    if max_processes is None:
        return ProcessBudget.NONE, None
    choice = os.environ.get(CGROUP_ENV, "").strip()
    if choice.lower() not in ("off", "0", "no", "false"):
        parent = Path(choice) if choice else pids_cgroup_parent()
        if parent is not None:
            try:
                return ProcessBudget.CGROUP, PidsCgroup.create(parent, max_processes)
            except OSError as exc:
                log.info("no pids cgroup under %s (%s): the process limit is RLIMIT_NPROC", parent, exc)
    return (ProcessBudget.RLIMIT if nproc_enforced else ProcessBudget.NONE), None


def _write(path: str | Path, value: object) -> None:
    """Write a cgroup file: one ``write`` of the value (no buffered file object: this is on every branch's path)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, str(value).encode("ascii"))
    finally:
        os.close(fd)


def _is_v2(path: str | Path) -> bool:
    return (Path(path) / "cgroup.controllers").is_file()


class SandboxGroups:
    """A sandbox's cgroups besides its pids group: ``memory`` (per-state memory limits that count tmpfs and page
    cache) and ``cpu`` (one CPU share for all the sandbox's cells), each ``jupiter-<host pid>-<n>`` under the
    host's own cgroup of that hierarchy; and each state's own group under every one of them (``StateGroup``).

    Why a group per state: a state's processes, ``setsid`` children included, are exactly the members of its
    group, so a timeout or a close kills them all (the process group missed a child that started a session of
    its own); and its memory limit counts what its cells put in ``/tmp`` and ``/dev/shm``, which the address
    space limit does not. Where a hierarchy is missing or not writable, it is left out (``available``)."""

    def __init__(self, pids: PidsCgroup | None, memory: Path | None, cpu: Path | None,
                 state_memory_bytes: int | None, per_state: bool = True) -> None:
        self.pids = pids
        self.memory = memory
        self.cpu = cpu
        self.state_memory_bytes = state_memory_bytes
        self.per_state = per_state
        self._removing: list[Path] = []
        self.protected: set[int] = set()  # host pids of the zygote and the live runtimes (see StateGroup.kill)
        self._usage_fd: int | None = None
        self._file_bytes = 0
        self._file_read_at = float("-inf")

    def memory_in_use(self, file_refresh_s: float = 1.0) -> int | None:
        """Memory of everything in the sandbox's memory group (zygote, states, their processes and tmpfs files),
        less its page cache, in bytes; None without a v1 memory group. The usage is one counter the kernel keeps
        (read through a descriptor kept open: ~0.01 ms); the page cache comes from ``memory.stat`` (a walk of
        the states' groups) at most every ``file_refresh_s``."""
        if self.memory is None:
            return None
        try:
            if self._usage_fd is None:
                self._usage_fd = os.open(self.memory / "memory.usage_in_bytes", os.O_RDONLY | os.O_CLOEXEC)
            usage = int(os.pread(self._usage_fd, 32, 0))
        except (OSError, ValueError):
            return None
        now = time.monotonic()
        if now - self._file_read_at >= file_refresh_s:
            self._file_read_at = now
            try:
                stat = dict(line.split() for line in (self.memory / "memory.stat").read_text().splitlines())
                self._file_bytes = int(stat.get("total_active_file", 0)) + int(stat.get("total_inactive_file", 0))
            except (OSError, ValueError):
                pass
        return max(0, usage - self._file_bytes)

    def rescue(self, pids: Iterable[int], state_paths: Sequence[Path]) -> None:
        """Move ``pids`` from a state's groups back to the sandbox's own (the parent of each state group)."""
        for pid in pids:
            log.warning("runtime %s was found in another state's cgroup (moved there by a cell): moved back", pid)
            for path in state_paths:
                try:
                    _write(path.parent / "cgroup.procs", pid)
                except OSError as exc:
                    log.warning("could not move runtime %s back from %s: %s", pid, path, exc)

    @classmethod
    def open(cls, pids: PidsCgroup | None, state_memory_mb: float | None, cpu_weight: float | None,
             per_state: bool = True) -> "SandboxGroups":
        """Create the sandbox's memory and cpu groups where the host allows it (``$JUPITER_SANDBOX_CGROUP=off``
        disables every cgroup). ``pids``: the sandbox's PidsCgroup, or None."""
        memory = cpu = None
        if os.environ.get(CGROUP_ENV, "").strip().lower() not in ("off", "0", "no", "false"):
            memory = _make_group("memory", None)
            if memory is not None and _is_v2(memory):
                memory = None  # v2: the zygote would be an inner process; per-state memory needs v1 here
            if cpu_weight is not None:
                cpu = _make_group("cpu", cpu_weight)
        return cls(pids, memory, cpu, None if state_memory_mb is None else int(state_memory_mb * 1024 * 1024),
                   per_state)

    @property
    def procs_files(self) -> list[Path]:
        """Where the zygote's launcher writes its pid (pids, memory, cpu: those that exist)."""
        return [g / "cgroup.procs" for g in (self.pids.path if self.pids is not None else None, self.memory,
                                              self.cpu) if g is not None]

    def new_state(self, name: str) -> "StateGroup | None":
        """The group of one new state (created now; None where no hierarchy is usable or per-state groups are
        off)."""
        if not self.per_state:
            return None
        if self._removing:
            self.collect()
        paths: list[Path] = []
        memory: Path | None = None
        for base in (self.pids.path if self.pids is not None else None, self.memory):
            if base is None:
                continue
            path = base / name
            try:
                os.mkdir(path)
                if base is self.memory and self.state_memory_bytes is not None:
                    _write(os.path.join(path, "memory.limit_in_bytes"), self.state_memory_bytes)
                    memory = path
            except OSError as exc:
                log.info("no per-state cgroup %s: %s", path, exc)
                continue
            paths.append(path)
        return StateGroup(tuple(paths), memory, self) if paths else None

    def collect(self) -> None:
        """Remove the groups of ended states whose processes were still exiting when they were killed."""
        pending, self._removing = self._removing, []
        for path in pending:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                self._removing.append(path)

    def remove_later(self, path: Path) -> None:
        """Remove a state's group at the next ``collect`` (its members are still exiting)."""
        self._removing.append(path)

    def remove(self) -> None:
        """Remove the memory and cpu groups (what is left in them is killed); the pids group is removed by its
        owner."""
        self.collect()
        fd, self._usage_fd = self._usage_fd, None
        if fd is not None:
            os.close(fd)
        for path in (*self._removing, self.memory, self.cpu):
            if path is not None:
                PidsCgroup(path).remove()
        self._removing = []


def _make_group(controller: str, cpu_weight: float | None) -> Path | None:
    parent = cgroup_parent(controller)
    if parent is None:
        return None
    remove_stale_groups(parent)
    path = parent / f"jupiter-{os.getpid()}-{next(_group_numbers)}"
    try:
        if _is_v2(parent):
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if controller not in enabled:
                _write(parent / "cgroup.subtree_control", f"+{controller}")
        path.mkdir()
        if cpu_weight is not None:
            if _is_v2(path):
                _write(path / "cpu.weight", max(1, min(10000, int(cpu_weight))))
            else:
                _write(path / "cpu.shares", max(2, int(1024 * cpu_weight / 100)))
        return path
    except OSError as exc:
        log.info("no %s cgroup under %s (%s)", controller, parent, exc)
        try:
            path.rmdir()
        except OSError:
            pass
        return None


class StateGroup:
    """One state's cgroup in each hierarchy (``SandboxGroups.new_state``): its processes are its members.

    How a new state gets in without slowing its branch: a process moved by another one (``add``: the host writes
    its pid into ``cgroup.procs``) makes the kernel take ``cgroup_threadgroup_rwsem`` for writing, which waits for
    an RCU grace period: 14-17 ms per branch on this VM, most of what the per-state groups added to a branch. A
    single-threaded process that moves *itself* (writes ``0`` into a cgroup v1 ``tasks`` file) skips that lock
    (the kernel needs it only to keep another thread group stable): about 0.01 ms. So the host opens the ``tasks``
    files (``join_files``; the kernel checks the opener's credentials, root's) and hands them to the forking
    runtime with the fork request; the new state writes ``0`` into each before it does anything else
    (``_server._join_own_groups``), and the host checks that it did (``holds``; else ``add``)."""

    def __init__(self, paths: tuple[Path, ...], memory: Path | None, owner: SandboxGroups) -> None:
        self.paths = paths
        self.memory = memory
        self._owner = owner

    def add(self, pid: int) -> bool:
        """Move ``pid`` (host pid namespace) in; False where it could not be moved."""
        ok = True
        for path in self.paths:
            try:
                _write(path / "cgroup.procs", pid)
            except OSError as exc:
                log.warning("could not move runtime %s into %s: %s", pid, path, exc)
                ok = False
        return ok

    def join_files(self) -> list[int]:
        """Descriptors (write-only) of the v1 ``tasks`` file of each of the state's groups, for the new state to
        move itself in; empty where a group has none (cgroup v2: the host moves the state, ``add``)."""
        fds: list[int] = []
        for path in self.paths:
            try:
                fds.append(os.open(os.path.join(path, "tasks"), os.O_WRONLY | os.O_CLOEXEC))
            except OSError:
                for fd in fds:
                    os.close(fd)
                return []
        return fds

    def holds(self, pid: int) -> bool:
        """Whether process ``pid`` is a member of every group of the state (read from ``/proc/<pid>/cgroup``)."""
        try:
            fd = os.open(f"/proc/{pid}/cgroup", os.O_RDONLY | os.O_CLOEXEC)
            try:
                text = os.read(fd, 65536).decode(errors="replace")
            finally:
                os.close(fd)
        except OSError:
            return False
        where = {line.rstrip("/").rsplit("/", 1)[-1] for line in text.splitlines()}
        return all(path.name in where for path in self.paths)

    def pids(self) -> list[int]:
        return _procs(self.paths[0])

    def kill(self, timeout_s: float = 2.0) -> bool:
        """SIGKILL every member until none is left (a member forking meanwhile is caught by the next round).

        Members the sandbox protects (its zygote, other states' runtimes: ``SandboxGroups.protected``) are moved
        back to the sandbox's group instead: a cell that took over its runtime's code could keep the ``tasks``
        descriptor of a branch's group and move them there, so that killing that group would kill them."""
        deadline = time.monotonic() + timeout_s
        while True:
            members = self.pids()
            shielded = self._owner.protected.intersection(members)
            if shielded:
                self._owner.rescue(shielded, self.paths)
                members = [pid for pid in members if pid not in shielded]
            if not members:
                return True
            _kill_all(members)
            if time.monotonic() > deadline:
                return False
            time.sleep(0.001)

    def oom_killed(self) -> bool:
        """Whether the kernel killed a member for passing the state's memory limit."""
        if self.memory is None:
            return False
        try:
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value) > 0
        except (OSError, ValueError):
            pass
        return False

    def close(self) -> None:
        """Kill every member and remove the group (later, if members are still exiting)."""
        self.kill()
        for path in self.paths:
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:
                self._owner.remove_later(path)
