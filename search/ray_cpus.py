"""Keep a tree worker and every process it starts on as many cores as the worker declared to Ray.

Why: Ray's CPUs are logical. An actor that declares ``num_cpus=1`` may use any number of cores, and a tree worker
did: besides its own thread, its sandboxes start zygotes, fork states ahead of need and run cells in processes
of their own, so one worker kept more than one core busy and Ray, counting one CPU per worker, placed more
workers on a node than its cores could serve (``benchmarks/perf/ray_scaling.py``: 2 workers on 2 cores ran 1.13x
one worker). Pinned, a worker's whole process tree uses at most the cores it declared, so Ray's count is the truth.

Why CPU affinity (``sched_setaffinity``) and not a cgroup ``cpu.max`` quota: affinity needs no privilege (a
container's cgroup file system is usually read-only, so no quota could be written there); every child inherits
it through ``fork`` and ``exec`` (the sandbox's launcher, bubblewrap, the zygote's forks, what cells start), with
no change to the sandbox; and the thread pools in cells (BLAS, joblib) size themselves from the affinity mask,
where under a quota they would start one thread per host core and be throttled.

Which cores: Ray does not say. Unless a cluster runs with ``RAY_custom_unit_instance_resources=CPU``, every
worker's CPU is the same logical instance (id 0). So the workers of one node share its cores out among
themselves: a worker takes core ``k`` by holding an exclusive ``flock`` on ``cpu-<k>.lock`` in a folder every
worker of the node sees (``$JUPITER_CPU_LOCK_DIR``, default ``<tmp>/jupiter-cpus``). The kernel drops the lock
when the worker's process ends, however it ends, so a killed worker never strands a core, and two runs (or two
Ray clusters) on one machine never pin two workers to one core. Containers that share a host's cores but not its
``/tmp`` (pods under a CPU quota see every core) cannot see each other's locks; each starts its search at a core
of its own (from a hash of the host name, the pod's name there), so their workers do not all pile onto core 0.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import socket
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CpuPin", "LOCK_DIR_ENV", "pin_process", "lock_dir"]

log = logging.getLogger(__name__)

#: The folder of the per-core lock files (one per node, shared by every worker on it).
LOCK_DIR_ENV = "JUPITER_CPU_LOCK_DIR"


@dataclass(frozen=True)
class CpuPin:
    """Where a worker process was pinned.

    Fields:
        cores: the cores the process and its descendants may run on now (sorted); all of the host's allowed
            cores when nothing was pinned.
        pinned: whether the process was pinned (False: it runs where the scheduler puts it, as before).
        reason: why not, or why fewer cores than asked (empty when it got what it asked for).
    """

    cores: tuple[int, ...]
    pinned: bool
    reason: str = ""


def lock_dir() -> Path:
    """The folder of the per-core lock files: ``$JUPITER_CPU_LOCK_DIR`` or ``<tmp>/jupiter-cpus``."""
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "jupiter-cpus")


#: Descriptors of the lock files this process holds: kept open for the life of the process (closing one would
#: release its core). Module state because the claim is the process's, as its affinity is.
_held: dict[int, int] = {}


def pin_process(cpus: float, folder: Path | None = None) -> CpuPin:
    """Pin this process (all its threads) to ``cpus`` cores of this host that no other worker holds.

    ``cpus``: the Ray CPUs the worker declared. A whole number is pinned to that many cores; a fraction is
    left unpinned (several workers share a core there: which ones, only the scheduler can balance). Cores are
    taken from this process's allowed set (a container's cpuset is respected), in order from a start that
    depends on the host name (see the module's docstring). With fewer free cores than asked, the process is
    pinned to the ones it got (``reason`` says so); with none, it is left unpinned and a warning is logged (the
    node runs more workers than it has cores). Calling it again keeps the cores already held. Side effects:
    creates ``folder`` (default ``lock_dir()``) and a lock file per core there, holds an open descriptor per
    claimed core until the process ends, changes every thread's affinity.
    """
    allowed = sorted(os.sched_getaffinity(0))
    if _held:
        return CpuPin(tuple(sorted(_held)), True, "")
    if cpus != int(cpus) or cpus < 1:
        return CpuPin(tuple(allowed), False, f"{cpus} CPUs is not a whole number of cores: not pinned")
    want = int(cpus)
    folder = folder or lock_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        start = zlib.crc32(socket.gethostname().encode()) % len(allowed)
        for core in allowed[start:] + allowed[:start]:
            if len(_held) == want:
                break
            fd = _try_lock(folder / f"cpu-{core}.lock")
            if fd is not None:
                _held[core] = fd
    except OSError as exc:
        log.warning("cannot claim cores in %s (%s): this worker is not pinned", folder, exc)
        return CpuPin(tuple(allowed), False, f"lock folder {folder}: {exc}")
    if not _held:
        log.warning("every core of this host (%s) is held by another worker: this worker is not pinned, so the "
                    "node runs more workers than its cores serve", allowed)
        return CpuPin(tuple(allowed), False, f"all {len(allowed)} allowed cores are held by other workers")
    cores = tuple(sorted(_held))
    _set_affinity_of_all_threads(set(cores))
    reason = "" if len(cores) == want else f"asked for {want} cores, {len(cores)} were free"
    if reason:
        log.warning("worker pinned to %s: %s", cores, reason)
    return CpuPin(cores, True, reason)


def _try_lock(path: Path) -> int | None:
    """An open descriptor holding an exclusive lock on ``path``, or None when another process holds it."""
    fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return None
        raise
    return fd


def _set_affinity_of_all_threads(cores: set[int]) -> None:
    """``sched_setaffinity`` acts on one thread; the process's other threads (Ray's own) are set one by one.
    Threads started later inherit the mask of the thread that starts them; the listing is repeated until no
    new thread appeared meanwhile."""
    done: set[int] = set()
    while True:
        threads = {int(t) for t in os.listdir("/proc/self/task")} - done
        if not threads:
            return
        for tid in threads:
            try:
                os.sched_setaffinity(tid, cores)
            except ProcessLookupError:  # the thread ended meanwhile
                pass
        done |= threads

