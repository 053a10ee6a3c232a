"""One memory budget for every sandbox of a process: live states are evicted across sandboxes (trees) by least
recent use when their memory together would pass it.

Why one budget: each sandbox used to bound only itself (``max_live_states`` states of about 18 MB each), so 16
trees in flight took 20 GB and the machine ran out of memory. A process (a ``jupiter solve`` run, a service, a Ray
worker) now has one :class:`MemoryBudget` that every :class:`sandbox.Sandbox` joins (``SandboxConfig.
shared_memory_budget``); its default comes from the machine's available memory (``default_limit_bytes``).

Why the accounting is cheap: the budget is checked after every branch, so it must not read every live state's
``smaps`` (that made branching quadratic: 114 ms per branch at 300 states). Where the sandbox has a memory cgroup
(v1 memory hierarchy, root), its usage is one counter the kernel keeps for all its processes and their tmpfs
files: one ``pread`` of ``memory.usage_in_bytes`` (~0.01 ms), minus its page cache (reclaimable, not a reason to
evict), which is read from ``memory.stat`` at most every ``file_refresh_s``. Elsewhere each state's unique memory
(USS) is measured after its cells run and summed (``Sandbox.memory_in_use``). Either way a check costs the same
for 10 or 1,000 live states.
"""
from __future__ import annotations

import logging
import os
import threading
import weakref
from pathlib import Path
from typing import Protocol

from sandbox.config import SandboxConfig

__all__ = ["BUDGET_ENV", "Member", "MemoryBudget", "default_limit_bytes", "process_budget", "set_process_budget"]

log = logging.getLogger(__name__)

#: ``$JUPITER_SANDBOX_MEMORY_MB``: the process-wide budget in MiB (overrides the default from available memory).
BUDGET_ENV = "JUPITER_SANDBOX_MEMORY_MB"
#: Share of the memory available when the first sandbox starts that the default budget takes: the rest is for the
#: host itself (a model server, the search's trees) and for other processes.
DEFAULT_SHARE = 1 / 3
_MB = 1024 * 1024
#: Memory per live state that ``MemoryBudget.sandboxes_that_fit`` assumes at least until its members hold
#: ``MEASURED_STATES`` live states: a search's first trees hold only their roots, which share nearly all their pages
#: with the zygote (a few MiB each), while a state that ran a DABench cell holds about 9 MiB.
STATE_PRIOR_BYTES = 16 * _MB
MEASURED_STATES = 16


def _meminfo_available(meminfo: str = "/proc/meminfo") -> int | None:
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """Room left under the memory limit of this process's own cgroup (a container's), None without a limit."""
    from sandbox.runtime.limits import cgroup_parent

    group = cgroup_parent("memory")
    if group is None:
        return None
    for limit_name, usage_name in (("memory.max", "memory.current"), ("memory.limit_in_bytes",
                                                                      "memory.usage_in_bytes")):
        try:
            limit = (group / limit_name).read_text().strip()
            usage = int((group / usage_name).read_text().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None
        return max(0, int(limit) - usage)
    return None


def default_limit_bytes() -> int:
    """``$JUPITER_SANDBOX_MEMORY_MB`` when set, else a third of the memory available now (MemAvailable, or the
    room under this process's cgroup limit when that is smaller), at least 512 MiB."""
    env = os.environ.get(BUDGET_ENV, "").strip()
    if env:
        try:
            value = float(env)
        except ValueError as exc:
            raise ValueError(f"${BUDGET_ENV} must be a number of MiB, got {env!r}") from exc
        if value <= 0:
            raise ValueError(f"${BUDGET_ENV} must be positive, got {env!r}")
        return int(value * _MB)
    available = [v for v in (_meminfo_available(), _cgroup_room()) if v is not None]
    base = min(available) if available else 8 * 1024 * _MB
    return max(512 * _MB, int(base * DEFAULT_SHARE))


class Member(Protocol):
    """What the budget asks of a member sandbox (``sandbox.Sandbox``): its memory now and a way to evict its
    least recently used idle state. ``keep``: states never to evict (compared by identity), ``tried``: ``id()`` of
    states already tried."""

    config: SandboxConfig

    def memory_in_use(self) -> int: ...

    def memory_shape(self) -> tuple[int, int, int]: ...

    def least_recent_idle(self, keep: tuple[object, ...], tried: set[int]) -> tuple[float, object] | None: ...

    def evict_idle(self, slot: object) -> bool: ...


class MemoryBudget:
    """A memory budget shared by sandboxes: when their live states together pass ``limit_bytes``, the least
    recently used idle state of *any* of them is evicted (it comes back by replay when used again), until the sum
    fits or nothing idle is left. Thread-safe; sandboxes join and leave (``join``/``leave``, weakly held)."""

    def __init__(self, limit_bytes: int) -> None:
        if not (isinstance(limit_bytes, int) and limit_bytes > 0):
            raise ValueError(f"MemoryBudget.limit_bytes must be a positive number of bytes, got {limit_bytes!r}")
        self.limit_bytes = limit_bytes
        self._sandboxes: weakref.WeakSet[Member] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._evicting = threading.Lock()
        self.evictions = 0
        self.peak_bytes = 0
        self.reached = 0  # checks that found the sum over the budget

    def join(self, sandbox: Member) -> None:
        with self._lock:
            self._sandboxes.add(sandbox)

    def leave(self, sandbox: Member) -> None:
        with self._lock:
            self._sandboxes.discard(sandbox)

    @property
    def sandboxes(self) -> list[Member]:
        with self._lock:
            return list(self._sandboxes)

    def usage_bytes(self) -> int:
        """Memory of the live states of every member sandbox now (their zygotes included)."""
        total = sum(sb.memory_in_use() for sb in self.sandboxes)
        self.peak_bytes = max(self.peak_bytes, total)
        return total

    def sandboxes_that_fit(self, states: int) -> int | None:
        """How many sandboxes, each at ``states`` live states (capped by its own ``max_live_states``), the budget
        holds, from what its member sandboxes measure now: their mean base (the zygote) plus ``states`` times
        their mean memory per live state (at least ``STATE_PRIOR_BYTES`` while they hold fewer than
        ``MEASURED_STATES``). None while no member has a live state to measure.

        Why: a search that opens more trees than the budget holds at their peak makes the budget evict states
        the trees still need, and every eviction comes back as a replay of the evicted path (measured: 16 trees
        of 151 nodes under 7.5 GB: 8,953 evictions, 10,038 cells replayed beside 12,206 forks). Admitting trees
        by this figure keeps their states live instead."""
        shapes = [(*sb.memory_shape(), sb.config.max_live_states) for sb in self.sandboxes]
        live = sum(shape[2] for shape in shapes)
        if not shapes or live == 0:
            return None
        base = sum(shape[0] for shape in shapes) / len(shapes)
        per_state = sum(shape[1] for shape in shapes) / live
        if live < MEASURED_STATES:
            per_state = max(per_state, STATE_PRIOR_BYTES)
        kept = min(states, max(shape[3] for shape in shapes))
        return max(1, int(self.limit_bytes // max(1.0, base + kept * per_state)))

    def enforce(self, keep: tuple[object, ...] = ()) -> int:
        """Evict least recently used idle states (of any member sandbox, never one in ``keep``) while the sum is
        over the budget; returns how many were evicted. One caller evicts at a time; a concurrent caller returns
        at once (the one evicting brings the sum down for both)."""
        if self.usage_bytes() <= self.limit_bytes:
            return 0
        if not self._evicting.acquire(blocking=False):
            return 0
        evicted = 0
        try:
            self.reached += 1
            tried: set[int] = set()
            while self.usage_bytes() > self.limit_bytes:
                victim = None
                for sb in self.sandboxes:
                    candidate = sb.least_recent_idle(keep, tried)
                    if candidate is not None and (victim is None or candidate[0] < victim[0]):
                        victim = (candidate[0], sb, candidate[1])
                if victim is None:
                    log.info("memory budget (%d MiB) passed and no idle state is left to evict",
                             self.limit_bytes // _MB)
                    break
                _, sb, state = victim
                tried.add(id(state))
                if sb.evict_idle(state):
                    evicted += 1
        finally:
            self.evictions += evicted
            self._evicting.release()
        return evicted


_process_budget: MemoryBudget | None = None
_process_lock = threading.Lock()


def process_budget() -> MemoryBudget:
    """The process-wide budget every sandbox joins by default (made on first use: ``default_limit_bytes``)."""
    global _process_budget
    with _process_lock:
        if _process_budget is None:
            _process_budget = MemoryBudget(default_limit_bytes())
            log.info("sandbox memory budget of this process: %d MiB", _process_budget.limit_bytes // _MB)
        return _process_budget


def set_process_budget(limit_mb: float) -> MemoryBudget:
    """Set the process-wide budget (MiB); sandboxes already open keep the budget object and see the new limit."""
    if not (isinstance(limit_mb, (int, float)) and limit_mb > 0):
        raise ValueError(f"set_process_budget: limit_mb must be a positive number of MiB, got {limit_mb!r}")
    budget = process_budget()
    budget.limit_bytes = int(limit_mb * _MB)
    return budget
