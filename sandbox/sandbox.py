"""``Sandbox``: owns every runtime process of a set of notebook states, their snapshot budget and files."""
from __future__ import annotations

import enum
import itertools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sandbox.config import Backend, SandboxConfig
from sandbox.execution import ExecError, ExecStatus, Execution
from sandbox.runtime.base import (
    ProcessBudgetFull,
    Runtime,
    RuntimeDied,
    RuntimeDiskLimit,
    RuntimeOutOfMemory,
    RuntimeTimeout,
    uss_bytes,
)
from sandbox.runtime.budget import MemoryBudget, process_budget
from sandbox.runtime.fork import Zygote
from sandbox.runtime.isolation import LANDLOCK_SIGNAL_ABI, IsolationPlan, bwrap_works, landlock_abi, plan_isolation
from sandbox.runtime.limits import PidsCgroup, ProcessBudget, SandboxGroups, open_process_budget
from sandbox.runtime.workspace import Layout, tree_bytes
from sandbox.state import CellRecord, RootInfo, State, StateClosedError, StateSlot

if TYPE_CHECKING:
    from sandbox.runtime.kernel import KernelFactory

__all__ = ["Guarantee", "ProcessBudgetError", "Sandbox", "SandboxStats", "StateLostError", "SandboxClosedError"]

log = logging.getLogger(__name__)
_R = TypeVar("_R")


class StateLostError(RuntimeError):
    """A state could not be rebuilt (its replay hit an infrastructure failure); the state is unusable."""


class SandboxClosedError(RuntimeError):
    """The sandbox was closed."""


class ProcessBudgetError(RuntimeError):
    """A new state cannot be made: the sandbox's process budget is full and no idle state can be evicted (the
    budget is held by running cells' own processes). Nothing else is affected; retry once a state is closed."""


@dataclass(frozen=True)
class SandboxStats:
    """Counters of one Sandbox. ``replays`` counts rebuilds of a state by replaying recorded cells (after an
    eviction, a failure, an unsafe fork, or every branch on the KERNEL backend); ``fork_fallbacks`` the branches
    that could not fork (extra live threads) and replayed instead. ``process_budget`` says which process limit
    holds (``sandbox.runtime.limits.ProcessBudget``: ``cgroup`` = this sandbox's own pids cgroup, ``rlimit`` =
    RLIMIT_NPROC shared by every process of the runtimes' uid, ``none``). ``revivals``: live states whose process was
found gone while idle and rebuilt by replay; ``zygote_restarts``: the clean shell was started again after dying.
    ``memory_bytes``: memory of its live states now (``Sandbox.memory_in_use``); ``evictions`` include those the
    process-wide memory budget made. ``branches_ahead``: branches started by ``State.prefetch``;
    ``branches_ahead_taken``: those a ``branch()`` took (the rest were discarded)."""

    backend: str
    isolated: bool
    process_budget: str
    forks: int
    replays: int
    replayed_cells: int
    fork_fallbacks: int
    evictions: int
    live_states: int
    states: int
    runs: int
    timeouts: int
    memory_limits: int
    deaths: int
    revivals: int = 0
    zygote_restarts: int = 0
    disk_limits: int = 0
    disk_bytes: int = 0
    memory_bytes: int = 0
    branches_ahead: int = 0
    branches_ahead_taken: int = 0


def _close_made(future: Future[State]) -> None:
    """Close the state a discarded ``prefetch`` made (nothing when it failed or was cancelled)."""
    if not future.cancelled() and future.exception() is None:
        future.result().close()


class Guarantee(str, enum.Enum):
    """What holds against a hostile cell in a given sandbox (``Sandbox.guarantees``; docs/sandbox.md has the
    table of threats, how each is enforced and its test). Which hold depends on the host: bubblewrap, root,
    cgroups."""

    HOST_SECRETS = "cells get an allow-listed environment, not the host's (API keys)"
    HOST_READS = "the host reads no path a cell planted (crash reports, read_file)"
    DISK_QUOTA = "the sum of the workspaces is capped (disk_quota_mb)"
    HOST_HIDDEN = "cells see only the system, the Python environment and their inputs, and no network"
    ZYGOTE_PROTECTED = "a cell cannot signal the zygote (kill -1 does not end the sandbox)"
    SIGNALS_CONTAINED = ("a cell can signal and trace only its own state's processes and its branches (kill -1 spares "
                         "sibling states, /proc/<pid>/root of their programs is closed)")
    FILES_SEPARATED = "a state cannot reach another state's workspace, /tmp or /dev/shm"
    PROCESSES_CONTAINED = "a timeout or close kills every process the state started (setsid children too)"
    STATE_MEMORY = "a state's memory limit counts its /tmp and /dev/shm files"
    CPU_SHARE = "all cells of the sandbox together get one CPU share (cpu_weight)"
    PROCESS_BUDGET = "the sandbox's processes are capped (max_processes)"


class Sandbox:
    """Runs notebook cells in states that branch cheaply. Use as a context manager (``close()`` ends every
    process it started).

    >>> with Sandbox(SandboxConfig()) as sb:
    ...     root = sb.open_root(input_files=[Path("data.csv")])
    ...     child = root.branch(); ex = child.run("1+1")
    """

    def __init__(self, config: SandboxConfig | None = None, memory_budget: MemoryBudget | None = None) -> None:
        """``memory_budget``: the budget this sandbox joins instead of the process-wide one (a caller that keeps
        several budgets); ignored when ``config.shared_memory_budget`` is False."""
        self.config = config or SandboxConfig()
        cfg = self.config
        self._lock = threading.RLock()
        self._states: dict[State, StateSlot] = {}  # the open states: each handle and what the sandbox keeps of it
        self._live: OrderedDict[int, StateSlot] = OrderedDict()  # the live ones by id, least recently used first
        self._ids = itertools.count(1)
        self._generations = itertools.count(1)
        self._cell_uids = itertools.count(1)
        self._counts = {k: 0 for k in ("forks", "replays", "replayed_cells", "fork_fallbacks", "evictions",
                                       "runs", "timeouts", "memory_limits", "deaths", "revivals", "zygote_restarts",
                                       "disk_limits", "branches_ahead", "branches_ahead_taken")}
        self._ahead_pool: ThreadPoolExecutor | None = None  # made by the first ``prefetch``
        self._closed = False
        self._disk: dict[int, int] = {}  # bytes of each state's workspace, as last measured
        self._uss: dict[int, int] = {}  # without a memory cgroup: each live state's USS after its last cell
        self._zygote_uss = 0
        self._base_bytes = 0
        self._budget: MemoryBudget | None = None
        self._zygote: Zygote | None = None
        self._kernels: KernelFactory | None = None
        self._cgroup: PidsCgroup | None = None
        self._groups: SandboxGroups | None = None
        self.process_budget = ProcessBudget.NONE
        self.guarantees: frozenset[Guarantee] = frozenset()
        drop_uid = (cfg.backend == Backend.FORK and os.geteuid() == 0 and cfg.run_as_uid is not None
                    and cfg.isolation.value != "none" and bwrap_works())
        self.layout = Layout(cfg.root_dir, shared_writable=drop_uid, cell_uid=cfg.run_as_uid if drop_uid else None)
        try:
            if cfg.backend == Backend.FORK:
                self.isolation: IsolationPlan = plan_isolation(cfg, self.layout.root, (self.layout.inputs,))
                self._start_zygote()
            else:
                from sandbox.runtime.kernel import KernelFactory

                self.isolation = IsolationPlan(bwrap=False, uid=None, prefix=())
                self._kernels = KernelFactory(cfg, self.layout)
                if cfg.max_processes is not None and self.isolation.nproc_enforced:
                    self.process_budget = ProcessBudget.RLIMIT
            self.guarantees = self._guarantees()
            if self._zygote is not None and self._memory_group() is None:
                self._zygote_uss = uss_bytes(self._zygote_pid())
            self._base_bytes = self.memory_in_use()  # the zygote alone: what the sandbox holds before any state
            if cfg.shared_memory_budget:
                self._budget = memory_budget if memory_budget is not None else process_budget()
                self._budget.join(self)
            missing = [g for g in Guarantee if g not in self.guarantees]
            if missing and cfg.backend == Backend.FORK:
                log.warning("sandbox: these do not hold here (%s): %s", self._why_not(),
                            "; ".join(g.value for g in missing))
        except BaseException:
            if self._groups is not None:
                self._groups.remove()
            if self._cgroup is not None:
                self._cgroup.remove()
            self.layout.cleanup()
            raise

    def describe(self) -> str:
        """One line: the isolation in use and how many guarantees hold (``jupiter doctor`` lists them)."""
        held = len(self.guarantees)
        return (f"sandbox: {self.isolation.describe()}; {held} of {len(Guarantee)} guarantees hold"
                + ("" if held == len(Guarantee) else f" ({self._why_not()}; `jupiter doctor` says what is missing)"))

    def missing_guarantees(self) -> list[Guarantee]:
        """The guarantees of the threat table that do not hold in this sandbox (docs/sandbox.md)."""
        return [g for g in Guarantee if g not in self.guarantees]

    def cgroups(self) -> dict[str, bool]:
        """Which cgroup controls this sandbox got: ``pids`` (its process budget), ``memory`` (per-state memory
        limits) and ``cpu`` (one CPU share for its cells)."""
        groups = self._groups
        return {"pids": self._cgroup is not None, "memory": groups is not None and groups.memory is not None,
                "cpu": groups is not None and groups.cpu is not None}

    def why_not(self) -> str:
        """Why some guarantees do not hold here, in words ("settings" when the host lacks nothing)."""
        return self._why_not()

    def _guarantees(self) -> frozenset[Guarantee]:
        held = {Guarantee.HOST_SECRETS, Guarantee.HOST_READS}
        if self.config.disk_quota_mb is not None:
            held.add(Guarantee.DISK_QUOTA)
        if self.process_budget != ProcessBudget.NONE:
            held.add(Guarantee.PROCESS_BUDGET)
        if self.config.backend != Backend.FORK:
            return frozenset(held)
        if self.isolation.bwrap:
            held.add(Guarantee.HOST_HIDDEN)
            if self.isolation.uid is not None:
                held |= {Guarantee.ZYGOTE_PROTECTED, Guarantee.FILES_SEPARATED}
        if landlock_abi() >= LANDLOCK_SIGNAL_ABI:  # each state its own Landlock domain (the zygote is outside)
            held |= {Guarantee.ZYGOTE_PROTECTED, Guarantee.SIGNALS_CONTAINED}
        groups = self._groups if self._groups is not None and self._groups.per_state else None
        if groups is not None and groups.pids is not None:
            held.add(Guarantee.PROCESSES_CONTAINED)
        if groups is not None and groups.memory is not None:
            held |= {Guarantee.PROCESSES_CONTAINED, Guarantee.STATE_MEMORY}
        if self._groups is not None and self._groups.cpu is not None:
            held.add(Guarantee.CPU_SHARE)
        return frozenset(held)

    def _why_not(self) -> str:
        reasons = []
        if landlock_abi() < LANDLOCK_SIGNAL_ABI:
            reasons.append(f"no Landlock signal scoping (ABI {landlock_abi()} < {LANDLOCK_SIGNAL_ABI})")
        if not self.isolation.bwrap:
            reasons.append("no bubblewrap")
        elif self.isolation.uid is None:
            reasons.append("not root: cells keep the host's uid")
        if self._groups is None or (self._groups.pids is None and self._groups.memory is None):
            reasons.append("no usable cgroup")
        return ", ".join(reasons) or "settings"

    def _start_zygote(self) -> None:
        """Start the zygote inside this sandbox's own pids cgroup where the host allows it (then without
        RLIMIT_NPROC, which would count other sandboxes' processes too), else under the rlimit."""
        cfg = self.config
        self.process_budget, self._cgroup = open_process_budget(cfg.max_processes, self.isolation.nproc_enforced)
        self._groups = SandboxGroups.open(self._cgroup, cfg.state_memory_mb, cfg.cpu_weight, cfg.state_cgroups)
        self._zygote = self._new_zygote()
        pid = self._zygote.pid
        if self._cgroup is not None and (pid is None or not self._cgroup.holds(pid)):
            log.warning("the sandbox runtime did not join its cgroup %s: no process limit holds",
                        self._cgroup.path)
            self.process_budget = ProcessBudget.NONE

    def _restart_zygote(self) -> None:
        """Start a new zygote after the old one died: the tree goes on (its states are rebuilt by replay)."""
        with self._lock:
            self._check_open()
            old = self._zygote
            if old is not None and old.alive:
                return
            if old is not None:
                old.close()
            self._counts["zygote_restarts"] += 1
            self._zygote = self._new_zygote()

    def _new_zygote(self) -> Zygote:
        """A zygote in this sandbox's cgroups; without RLIMIT_NPROC where its pids cgroup counts the processes."""
        rlimits = self.config.rlimits()
        if self._cgroup is not None:
            rlimits["nproc"] = None
        return Zygote(self.config, self.layout, self.isolation, cgroup=self._cgroup, rlimits=rlimits,
                      groups=self._groups)

    # ---- context manager ----------------------------------------------------------------------------------
    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # ---- public API ---------------------------------------------------------------------------------------
    def open_root(self, input_files: Iterable[Path | str] = ()) -> State:
        """A fresh notebook state whose working directory shows ``input_files`` (read-only, by name)."""
        self._check_open()
        workspace, inputs_dir = self.layout.make_root_workspace(Path(p) for p in input_files)
        root = RootInfo(inputs_dir=inputs_dir, input_names=tuple(sorted(os.listdir(inputs_dir))))
        slot = StateSlot(next(self._ids), workspace, (), None, root)
        state = State(self, slot, None)
        with slot.lock:
            runtime = self._fresh_runtime(slot, reuse_workspace=True)
            self._attach(slot, runtime, handle=state)
        return state

    def run(self, state: State, code: str, timeout: float | None = None) -> Execution:
        """Run ``code`` as the next cell of ``state`` (what ``State.run`` does; its docstring says more)."""
        if not isinstance(code, str):
            raise TypeError(f"State.run: code must be a str, got {type(code).__name__}")
        timeout_s = self.config.timeout_s if timeout is None else float(timeout)
        if timeout_s <= 0:
            raise ValueError(f"State.run: timeout must be positive, got {timeout}")
        slot = self._slot_of(state)
        self._discard_ahead(slot)  # they hold the state as it was before this cell
        with slot.lock:
            self._check_open()
            self._check_slot(slot)
            return self._run(slot, code, timeout_s)

    def branch(self, state: State) -> State:
        """An independent child of ``state`` (what ``State.branch`` does): a copy of its namespace and files; one
        that ``prefetch`` started, where there is one."""
        parent = self._slot_of(state)
        with self._lock:
            ahead = parent.ahead.pop(0) if parent.ahead else None
        if ahead is not None:
            try:
                child = ahead.result()
            except (SandboxClosedError, StateClosedError):
                raise
            except Exception as exc:  # made again now, where the error (if it is one) reaches the caller
                log.info("sandbox: a branch of state %d started ahead failed (%s); branching it now", parent.sid, exc)
            else:
                self._count("branches_ahead_taken")
                return child
        return self._new_branch(state)

    def prefetch(self, state: State, n: int) -> None:
        """Start branches of ``state`` in the background until ``n`` are ready or on their way (what
        ``State.prefetch`` does; its docstring says why)."""
        if n < 0:
            raise ValueError(f"State.prefetch: n must be >= 0, got {n}")
        slot = self._slot_of(state)
        self._check_slot(slot)
        with self._lock:
            self._check_open()
            if self._ahead_pool is None:
                # forks of different states run side by side (their processes do the work; these threads wait)
                self._ahead_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sandbox-branch-ahead")
            for _ in range(n - len(slot.ahead)):
                slot.ahead.append(self._ahead_pool.submit(self._new_branch, state))
                self._counts["branches_ahead"] += 1

    def _discard_ahead(self, slot: StateSlot) -> None:
        """Drop the branches ``prefetch`` started for ``slot``: cancelled if not begun, else closed once made."""
        with self._lock:
            ahead, slot.ahead = slot.ahead, []
        for future in ahead:
            if not future.cancel():
                future.add_done_callback(_close_made)

    def _new_branch(self, state: State) -> State:
        parent = self._slot_of(state)
        with parent.lock:
            self._check_open()
            self._check_slot(parent)
            slot = StateSlot(next(self._ids), self.layout.new_state_dir(), parent.history, parent, parent.root)
            child = State(self, slot, state)
            with slot.lock:
                self._branch(parent, slot, child)
        return child

    def restore(self, state: State, cells: Sequence[str]) -> State:
        """A descendant of ``state`` recorded as having run ``cells``, with no runtime yet (what ``State.restore``
        does): its first use rebuilds it by replay, exactly as an evicted state comes back."""
        cells = tuple(cells)
        for code in cells:
            if not isinstance(code, str):
                raise TypeError(f"State.restore: cells must be str, got {type(code).__name__}")
        parent = self._slot_of(state)
        with parent.lock:
            self._check_open()
            self._check_slot(parent)
            history = parent.history + tuple(CellRecord(next(self._cell_uids), code) for code in cells)
            slot = StateSlot(next(self._ids), self.layout.new_state_dir(), history, parent, parent.root)
            restored = State(self, slot, state)
            with self._lock:
                self._states[restored] = slot
        return restored

    def close_state(self, state: State) -> None:
        """Release the runtime and the working directory of ``state`` (what ``State.close`` does). Idempotent."""
        with self._lock:
            slot = self._states.get(state)
        if slot is None:
            if state.closed:
                return
            raise ValueError(f"state {state.id} belongs to another sandbox")
        self._discard_ahead(slot)
        with slot.lock:
            if slot.closed:
                return
            slot.closed = True
            with self._lock:
                self._states.pop(state, None)
                self._live.pop(slot.sid, None)
                self._uss.pop(slot.sid, None)
            runtime, slot.runtime = slot.runtime, None
            if runtime is not None:
                runtime.close()
            if not self._closed:
                self.layout.discard(slot.workspace)
            with self._lock:
                self._disk.pop(slot.sid, None)

    def stats(self) -> SandboxStats:
        with self._lock:
            counts = dict(self._counts)
            live, states, disk = len(self._live), len(self._states), sum(self._disk.values())
        return SandboxStats(backend=self.config.backend.value, isolated=self.isolation.bwrap,
                            process_budget=self.process_budget.value, live_states=live, states=states,
                            disk_bytes=disk, memory_bytes=self.memory_in_use(), **counts)

    def live_memory_bytes(self) -> int:
        """Summed unique memory (USS) of the live states' processes, read now from each (``smaps_rollup``: slow
        with many states; the budgets use ``memory_in_use``)."""
        with self._lock:
            runtimes = [s.runtime for s in self._live.values() if s.runtime is not None]
        return sum(rt.memory_bytes() for rt in runtimes)

    def memory_in_use(self) -> int:
        """Memory this sandbox holds now, as the budgets count it, at a cost that does not grow with the number of
        live states: its memory cgroup's usage less page cache (everything its processes and their tmpfs files
        hold) where it has one, else the USS of each live state measured after its last cell, plus the zygote's."""
        group = self._memory_group()
        if group is not None:
            value = group.memory_in_use()
            if value is not None:
                return value
        with self._lock:
            return self._zygote_uss + sum(self._uss.values())

    @property
    def memory_budget(self) -> MemoryBudget | None:
        """The memory budget this sandbox belongs to (the process-wide one by default), None when it has none."""
        return self._budget

    def memory_shape(self) -> tuple[int, int, int]:
        """``(base bytes, bytes of the live states, live states)`` now: what the sandbox held before its first
        state (the zygote) and what its live states add, for estimates of a sandbox's memory at a given number
        of states (``MemoryBudget.sandboxes_that_fit``). As cheap as ``memory_in_use``."""
        used = self.memory_in_use()
        with self._lock:
            live = len(self._live)
        return self._base_bytes, max(0, used - self._base_bytes), live

    def _memory_group(self) -> SandboxGroups | None:
        groups = self._groups
        return groups if groups is not None and groups.memory is not None else None

    def _zygote_pid(self) -> int:
        return 0 if self._zygote is None else (self._zygote.host_pid or 0)

    def close(self) -> None:
        """Stop every process this sandbox started and delete its temporary folders. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            slots = list(self._states.values())
            self._live.clear()
            pool, self._ahead_pool = self._ahead_pool, None
        if self._budget is not None:
            self._budget.leave(self)
        for slot in slots:
            runtime, slot.runtime = slot.runtime, None
            slot.closed = True
            if runtime is not None:
                runtime.close()
        if pool is not None:  # a branch being made now fails on the closed sandbox (``_attach``): wait for it
            pool.shutdown(wait=True, cancel_futures=True)
        if self._zygote is not None:
            self._zygote.close()
        if self._groups is not None:
            self._groups.remove()
        if self._cgroup is not None:
            self._cgroup.remove()
        self.layout.cleanup()

    def reset(self) -> bool:
        """Close every state and delete their folders and their roots' input copies, keeping the zygote, the
        cgroups and the memory budget's membership (the runtime's home and the counters carry on).

        Why: a search driver hands a finished tree's sandbox to the next tree, whose root then forks from a
        warm zygote instead of starting one (about 1.7 s of CPU with the default preloads, once per tree).
        Call it only when none of the states is in use. False when the sandbox is closed (make a new one).
        """
        with self._lock:
            if self._closed:
                return False
            states = list(self._states)
        for state in states:
            self.close_state(state)
        self.layout.clear_inputs()
        with self._lock:
            self._disk.clear()
            self._uss.clear()
        return True

    # ---- what the memory budget asks of its member sandboxes (``sandbox.runtime.budget.Member``) --------------
    def least_recent_idle(self, keep: tuple[object, ...], tried: set[int]) -> tuple[float, StateSlot] | None:
        """``(last use, state)`` of this sandbox's least recently used live state outside ``keep`` and ``tried``
        (``id()`` of states already tried), for the process-wide budget: it compares sandboxes by the time and
        hands the one it picks to ``evict_idle``."""
        with self._lock:
            for slot in self._live.values():
                if id(slot) not in tried and all(slot is not k for k in keep):
                    return slot.last_used, slot
        return None

    def evict_idle(self, slot: object) -> bool:
        """Evict a state of this sandbox (from ``least_recent_idle``) if it is idle (no thread is using it) and
        live; True when it was. It comes back by replay on its next use."""
        if not isinstance(slot, StateSlot):
            raise TypeError(f"Sandbox.evict_idle: expected a state from least_recent_idle, got {type(slot).__name__}")
        if not slot.lock.acquire(blocking=False):
            return False
        try:
            if slot.runtime is None or self._closed:
                return False
            self._drop_runtime(slot)
            self._count("evictions")
            return True
        finally:
            slot.lock.release()

    # ---- internals ----------------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosedError("the sandbox is closed")

    @staticmethod
    def _check_slot(slot: StateSlot) -> None:
        if slot.closed:
            raise StateClosedError(f"state {slot.sid} is closed")

    def _slot_of(self, state: State) -> StateSlot:
        """What this sandbox keeps of ``state``. Raises SandboxClosedError, StateClosedError (a closed state) or
        ValueError (a state of another sandbox)."""
        self._check_open()
        with self._lock:
            slot = self._states.get(state)
        if slot is not None:
            return slot
        if state.closed:
            raise StateClosedError(f"state {state.id} is closed")
        raise ValueError(f"state {state.id} belongs to another sandbox")

    def _count(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def _run(self, slot: StateSlot, code: str, timeout_s: float) -> Execution:
        """Run a cell in ``slot`` (its lock held, both open)."""
        runtime = self._ensure_live(slot)
        self._count("runs")
        started = time.monotonic()
        try:
            if self.config.disk_quota_mb is None or not runtime.watches_disk:
                raw = runtime.run(code, timeout_s)
            else:  # the runtime measures the workspaces while the cell runs
                raw = runtime.run(code, timeout_s, over_quota=lambda: self._over_disk_quota(slot),
                                  check_every_s=self.config.disk_check_s)
        except RuntimeDiskLimit as exc:
            return self._disk_limit(slot, code, str(exc), started)
        except RuntimeTimeout as exc:
            self._count("timeouts")
            return self._failure(slot, code, ExecStatus.TIMEOUT, "TimeoutError", str(exc), started)
        except RuntimeOutOfMemory as exc:
            self._count("memory_limits")
            return self._failure(slot, code, ExecStatus.MEMORY_LIMIT, "MemoryError", str(exc), started)
        except RuntimeDied as exc:
            self._count("deaths")
            return self._failure(slot, code, ExecStatus.DIED, "RuntimeDied", str(exc), started)
        outputs = tuple(raw.outputs)
        error = next((o for o in outputs if o["output_type"] == "error"), None)
        exec_error = None if error is None else ExecError(error["ename"], error["evalue"], tuple(error["traceback"]))
        out_of_memory = raw.ename == "MemoryError" or (error is not None and error["ename"] == "MemoryError")
        if not raw.success and out_of_memory:
            self._count("memory_limits")
            self._drop_runtime(slot)
            return self._execution(code, ExecStatus.MEMORY_LIMIT, outputs, raw.duration_s, raw.execution_count,
                                   exec_error, raw.dropped_chars, runtime.generation)
        if self.config.disk_quota_mb is not None:
            reason = self._over_disk_quota(slot)
            if reason is not None:
                return self._disk_limit(slot, code, reason, started)
        if not raw.success:
            status = ExecStatus.ERROR
            if exec_error is None:
                exec_error = ExecError("Error", "the cell failed without an error message")
        else:
            status = ExecStatus.TRUNCATED if raw.dropped_chars else ExecStatus.OK
        slot.history = slot.history + (CellRecord(next(self._cell_uids), code),)
        if self._memory_group() is None and (self._budget is not None or self.config.max_memory_mb is not None):
            size = runtime.memory_bytes()  # no memory cgroup: the budgets count each state's USS after a cell
            with self._lock:
                if slot.sid in self._live:
                    self._uss[slot.sid] = size
        self._touch(slot)
        return self._execution(code, status, outputs, raw.duration_s, raw.execution_count, exec_error,
                               raw.dropped_chars, runtime.generation)

    def _branch(self, parent: StateSlot, slot: StateSlot, child: State) -> None:
        """Give the new ``slot`` (handle ``child``) a runtime: a fork of ``parent``'s, else a replay (both locks
        held, both open)."""
        runtime: Runtime | None = None
        for _attempt in range(2):
            source = self._ensure_live(parent)
            if not source.can_fork:
                break
            try:
                runtime = self._fork(source, slot, keep=(parent, slot))
            except RuntimeDied as exc:
                if self._closed:  # the sandbox closed under the fork (a branch made ahead): nothing to rebuild
                    raise SandboxClosedError("the sandbox is closed") from exc
                log.warning("sandbox: branching state %d failed, rebuilding it: %s", parent.sid, exc)
                self._drop_runtime(parent)
                continue
            if runtime is None:
                self._count("fork_fallbacks")
            else:
                self._count("forks")
            break
        if runtime is None:
            runtime = self._rebuild(slot, skip=parent)
        self._touch(parent)
        self._attach(slot, runtime, keep=(parent,), handle=child)
        with self._lock:  # a branch starts with a copy of its parent's files
            self._disk[slot.sid] = self._disk.get(parent.sid, 0)

    def _over_disk_quota(self, slot: StateSlot) -> str | None:
        """Measure the state's workspace; the reason when the sandbox's workspaces together pass the quota."""
        size = tree_bytes(slot.workspace)
        with self._lock:
            self._disk[slot.sid] = size
            total = sum(self._disk.values())
        quota = self.config.disk_quota_mb
        if quota is None or total <= quota * 1024 * 1024:
            return None
        return (f"the sandbox's workspaces passed their disk quota ({quota} MiB; {total / 2**20:.0f} MiB with "
                f"this cell's files): the cell was stopped and its files removed")

    def _disk_limit(self, slot: StateSlot, code: str, reason: str, started: float) -> Execution:
        """The cell that passed the disk quota: its state's runtime and workspace go (the state comes back from
        its recorded cells on next use), so the space is free again."""
        self._count("disk_limits")
        execution = self._failure(slot, code, ExecStatus.DISK_LIMIT, "DiskQuotaExceeded", reason, started)
        self.layout.discard(slot.workspace)
        with self._lock:
            self._disk.pop(slot.sid, None)
        return execution

    # ---- runtime bookkeeping ----------------------------------------------------------------------------------
    def _ensure_live(self, slot: StateSlot) -> Runtime:
        """The state's runtime, rebuilding it by replay when it was evicted or lost. Caller holds slot.lock."""
        runtime = slot.runtime
        if runtime is not None and not runtime.closed:
            if runtime.alive:
                return runtime
            # Its process is gone while idle (a cell of another state signalled it, or the zygote died): the
            # state comes back by replay instead of failing the next cell or branch.
            self._count("revivals")
            self._drop_runtime(slot)
        runtime = self._rebuild(slot, skip=None)
        self._attach(slot, runtime)
        return runtime

    def _rebuild(self, slot: StateSlot, skip: StateSlot | None) -> Runtime:
        """A new runtime holding the state: fork the nearest live ancestor whose history is a prefix of the
        state's, then replay the remaining recorded cells; from a fresh runtime when no ancestor qualifies."""
        target = slot.history
        runtime: Runtime | None = None
        done = 0
        ancestor = slot.parent
        self.layout.discard(slot.workspace)
        while ancestor is not None and runtime is None:
            candidate = ancestor
            ancestor = ancestor.parent
            if candidate is skip or candidate.closed or candidate.runtime is None:
                continue
            n = len(candidate.history)
            if n > len(target) or candidate.history != target[:n]:
                continue
            if not candidate.lock.acquire(blocking=False):
                continue
            try:
                source = candidate.runtime
                if source is None or source.closed or not source.can_fork:
                    continue
                try:
                    runtime = self._fork(source, slot, keep=(slot, candidate))
                except RuntimeDied:
                    self._drop_runtime(candidate)
                    runtime = None
                if runtime is None:
                    self._count("fork_fallbacks")
                else:
                    self._count("forks")
                    done = n
            finally:
                candidate.lock.release()
        if runtime is None:
            runtime = self._fresh_runtime(slot, reuse_workspace=False)
        self._count("replays")
        for record in target[done:]:
            try:
                raw = runtime.run(record.code, self.config.timeout_s)
            except (RuntimeTimeout, RuntimeDied) as exc:
                runtime.close()
                raise StateLostError(f"state {slot.sid} could not be rebuilt: replaying a recorded cell failed "
                                     f"({exc})") from exc
            if not raw.success:
                log.debug("replayed cell of state %s raised again (expected for recorded errors)", slot.sid)
            self._count("replayed_cells")
        return runtime

    def _fresh_runtime(self, slot: StateSlot, reuse_workspace: bool) -> Runtime:
        info = slot.root
        workspace = slot.workspace
        if not reuse_workspace:
            self.layout.make_state_dir(workspace)
            for name in info.input_names:
                (workspace / name).symlink_to(os.path.relpath(info.inputs_dir / name, workspace))
        generation = next(self._generations)
        zygote = self._zygote
        if zygote is not None:
            if not zygote.alive:
                self._restart_zygote()
            try:
                return self._within_budget(lambda: self._live_zygote().spawn(workspace, generation), keep=(slot,))
            except (RuntimeDied, OSError) as exc:
                if self._live_zygote().alive:
                    raise
                log.warning("the sandbox runtime died (%s): restarting it", exc)
                self._restart_zygote()
                return self._live_zygote().spawn(workspace, generation)
        assert self._kernels is not None
        return self._kernels.start(workspace, generation)

    def _live_zygote(self) -> Zygote:
        """The current zygote (the FORK backend; a restart replaces it)."""
        assert self._zygote is not None
        return self._zygote

    def _attach(self, slot: StateSlot, runtime: Runtime, keep: tuple[StateSlot, ...] = (),
                handle: State | None = None) -> None:
        """Make ``runtime`` the state's live process; ``handle``: a new state's handle, registered now."""
        slot.runtime = runtime
        slot.generation = runtime.generation
        with self._lock:
            if self._closed:
                runtime.close()
                raise SandboxClosedError("the sandbox was closed while a state was being created")
            if handle is not None:
                self._states[handle] = slot
            self._live[slot.sid] = slot
            self._live.move_to_end(slot.sid)
            slot.last_used = time.monotonic()
        self._enforce_budget(keep=(slot, *keep))

    def _touch(self, slot: StateSlot) -> None:
        with self._lock:
            if slot.sid in self._live:
                self._live.move_to_end(slot.sid)
            slot.last_used = time.monotonic()

    def _drop_runtime(self, slot: StateSlot) -> None:
        runtime, slot.runtime = slot.runtime, None
        with self._lock:
            self._live.pop(slot.sid, None)
            self._uss.pop(slot.sid, None)
        if runtime is not None:
            runtime.close()

    def _failure(self, slot: StateSlot, code: str, status: ExecStatus, ename: str, message: str,
                 started: float) -> Execution:
        generation = slot.generation
        self._drop_runtime(slot)
        output = {"output_type": "error", "ename": ename, "evalue": message, "traceback": [f"{ename}: {message}"]}
        return self._execution(code, status, (output,), time.monotonic() - started, None,
                               ExecError(ename, message, tuple(output["traceback"])), 0, generation)

    def _execution(self, code: str, status: ExecStatus, outputs: tuple[dict[str, Any], ...], duration: float,
                   count: int | None, error: ExecError | None, dropped: int, generation: int | None) -> Execution:
        if dropped:
            outputs = outputs + ({"output_type": "stream", "name": "stderr",
                                  "text": f"\n[output truncated: {dropped} characters dropped]\n"},)
        return Execution(code=code, status=status, outputs=outputs, duration_s=duration, execution_count=count,
                         error=error, dropped_chars=dropped, generation=generation,
                         observation_chars=self.config.observation_chars)

    def _fork(self, source: Runtime, slot: StateSlot, keep: tuple[StateSlot, ...]) -> Runtime | None:
        """A fork of ``source`` working in ``slot``'s folder (None: it cannot fork now, e.g. extra live threads)."""
        return self._within_budget(
            lambda: source.fork(slot.workspace, next(self._generations), self.config.startup_timeout_s), keep=keep)

    def _within_budget(self, make: Callable[[], _R], keep: tuple[StateSlot, ...]) -> _R:
        """Call ``make`` (a fork); while the process budget is full, evict the least recently used idle state and
        try again. Raises ProcessBudgetError when nothing is left to evict."""
        while True:
            try:
                return make()
            except ProcessBudgetFull as exc:
                if not self._evict_one(keep):
                    raise ProcessBudgetError(
                        f"the sandbox's process budget ({self.config.max_processes} processes) is full and no idle "
                        f"state is left to evict: running cells hold it ({exc})") from exc
                log.info("process budget full: evicted an idle state to branch")

    def _evict_one(self, keep: tuple[StateSlot, ...]) -> bool:
        """Evict the least recently used idle live state outside ``keep``; False when there is none."""
        with self._lock:
            candidates = [s for s in self._live.values() if all(s is not k for k in keep)]
        return any(self.evict_idle(s) for s in candidates)

    def _enforce_budget(self, keep: tuple[StateSlot, ...]) -> None:
        """Evict least-recently-used idle states beyond the count cap and this sandbox's ``max_memory_mb``; then
        let the process-wide memory budget evict across sandboxes."""
        self._enforce_own_budget(keep)
        if self._budget is not None:
            self._budget.enforce(keep)

    def _enforce_own_budget(self, keep: tuple[StateSlot, ...]) -> None:
        cfg = self.config
        while True:
            with self._lock:
                over_count = len(self._live) > cfg.max_live_states
            if not over_count and cfg.max_memory_mb is not None:
                over_count = self.memory_in_use() > cfg.max_memory_mb * 1024 * 1024
            if not over_count or not self._evict_one(keep):  # only when over: eviction walks the live states
                return
