"""Benchmark: the sandbox at scale — many live states in one sandbox, and many trees through the engine.

Two parts, one JSON object:

- ``live_states``: for each size N (default 100 and 300; ``--full``: 100, 300, 500, 1,000), one sandbox with a
  budget raised to hold N states (``max_live_states``, ``max_processes``) makes N live states (branches of a root
  that loaded a DABench table, each running one cell), then times ``--branches`` (default 200) more branches (branch
  + one cell, timed; each closed after) at that size. Printed: ``create_s``, per-branch ``branch_ms_p50``/``p95``
  (and ``p99``/``max``), summed ``uss_mb``/``pss_mb`` of the states (read once, after the timing), ``limit_reached``
  (evictions, process budget or memory budget hit), and whether the process-wide memory budget was on, and
  ``kernel_stalls``: what the machine's ``/proc/vmstat`` counted during the timed branches (direct compaction and
  reclaim stalls, huge-page faults and fallbacks: any process's, so a quiet machine is needed to pin a slow tail on
  them). With the budget on, its check is timed on its own at every branch (``budget_check_ms`` p50/p95/max and
  ``budget_check_share_pct``, its share of the branches' wall time: the issue's "within 10 %" as a measured share).
  With ``--budget-ab`` every size runs twice, with the memory budget on (its limit above what N states take, so it
  costs its check and evicts nothing) and off; ``--interleave`` makes every other branch of the budget-on run skip
  the budget (``ab_interleaved``: both arms in one sandbox, the same drift on both).
  Why a branch was slow, per branch: CPU of this process, of the state branched from and of the new state
  (``cpu_ms``), their wait for a CPU (``runqueue_ms``), the rest of the wall time asleep (``blocked_ms``: e.g. the
  fork waiting for the kernel's lock on the pages its states share), this process's garbage collections
  (``host_gc``), and the CPU of kernel threads (``kernel_threads_cpu_ms``: DAMON's ``kdamond`` walks every mapping
  of the pages it samples, and a root's pages are mapped by every state forked from it); ``slow_branches``: the
  same averaged over the slowest 5 % (ms).
- ``trees``: ``--trees`` trees (default 8; ``--full``: 100) of the simulated policy (``sim_policy.py``) at the
  default search settings of collect mode (50 iterations, K = 3: about 150 nodes each) through the project's engine
  (``search.solve_many``, a default ``SandboxConfig`` sandbox per tree in flight, reset for the next tree: the
  process-wide memory budget decides what stays live). Printed: wall, nodes, nodes/s, peak PSS of this process and
  its sandboxes (sampled every ``--sample-s``), peak processes, tree file bytes per node (``search.save_tree``), the
  budget's evictions, the trees in flight at most (``peak_trees_in_flight``; the setting's cap is
  ``max_trees_in_flight``), and the CPU seconds of this process and of its sandboxes (``cpu_ms_per_node``: unlike
  wall time, it does not depend on what else the machine runs). ``--in-flight`` sets ``max_trees_in_flight``;
  ``--fixed-trees`` turns ``fit_trees_to_memory`` off (that many trees whatever the budget holds).

Usage: ``python benchmarks/perf/scale.py --json`` (a few minutes); ``--full`` for the issue's sizes;
``--full --trees 0 --budget-ab --interleave`` for the live-states targets alone.
"""
from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import resource
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.paths import default_data_dir  # noqa: E402
from sandbox import ProcessBudgetError, Sandbox, SandboxConfig  # noqa: E402
from sandbox.runtime.base import pss_bytes, uss_bytes  # noqa: E402
from sandbox.runtime.budget import MemoryBudget, process_budget  # noqa: E402

MB = 1024 * 1024
TABLE = "Credit.csv"
ROOT_CELL = "import pandas as pd\ndf = pd.read_csv('Credit.csv', index_col=0)\ndf['Util'] = df['Balance'] / df['Limit']"
CHILD_CELL = "summary = df.groupby('Ethnicity')['Balance'].agg(['mean', 'count'])\nlen(summary)"


def _pct(values: list[float], q: float, digits: int = 2) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000.0, digits)


def _check(ex: Any, what: str) -> None:
    if not ex.ok:
        raise SystemExit(f"scale: a benchmark cell failed ({what}): {ex.status.value}: {ex.observation()}")


#: kernel counters (``/proc/vmstat``) of the stalls a branch can hit outside the sandbox's own code: direct
#: compaction and reclaim (a huge-page fault in a fragmented or full memory), huge pages that fell back to 4 KiB
VMSTAT_KEYS = ("compact_stall", "allocstall_normal", "allocstall_movable", "thp_fault_alloc", "thp_fault_fallback")


def _vmstat() -> dict[str, int]:
    try:
        pairs = (line.split() for line in Path("/proc/vmstat").read_text().splitlines())
        return {key: int(value) for key, value in pairs if key in VMSTAT_KEYS}
    except (OSError, ValueError):
        return {}


#: kernel threads whose CPU during the timed branches is counted (``kernel_threads_cpu_ms``): DAMON's monitor
#: (``kdamond``: its physical-address sampling walks every mapping of a sampled page, and a root's pages are mapped
#: by every live state forked from it), reclaim and compaction. Their CPU is not any sandbox process's.
KERNEL_THREADS = ("kdamond", "kswapd", "kcompactd", "khugepaged")


def _kernel_threads() -> dict[str, list[int]]:
    """Pids of the ``KERNEL_THREADS`` running now, by name (a kernel thread has no command line)."""
    found: dict[str, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            comm = Path(f"/proc/{entry.name}/comm").read_text().strip()
        except OSError:
            continue
        for name in KERNEL_THREADS:
            if comm.startswith(name):
                found.setdefault(name, []).append(int(entry.name))
    return found


def _schedstat(pid: int) -> tuple[float, float]:
    """``(CPU seconds, seconds waited runnable on a run queue)`` of a process's main thread over its life (0, 0
    when it is gone). Why these: on a busy machine a branch's wall time is mostly waiting for a CPU; what is left
    of the wall time beyond both (``blocked_ms``) is time spent asleep, e.g. on a kernel lock."""
    try:
        fields = Path(f"/proc/{pid}/schedstat").read_text().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0, 0.0


class _TimedBudget(MemoryBudget):
    """The memory budget of the live-states part, with each ``enforce`` (the check a branch makes) timed: its
    cost is measured per branch, not read off the difference of two noisy runs with the budget on and off."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(limit_bytes)
        self.calls: list[float] = []

    def enforce(self, keep: tuple[Any, ...] = ()) -> int:
        started = time.perf_counter()
        try:
            return super().enforce(keep)
        finally:
            self.calls.append(time.perf_counter() - started)


class _GcPauses:
    """Collections of this process's cyclic garbage collector (``gc.callbacks``): how many of each generation
    and their pause, while recording (the host's share of a slow branch could be a full collection)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, float, float]] = []  # (generation, start, seconds)
        self._started = 0.0
        self.recording = False

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if not self.recording:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.events.append((info["generation"], self._started, time.perf_counter() - self._started))

    def __enter__(self) -> _GcPauses:
        gc.callbacks.append(self)
        self.recording = True
        return self

    def __exit__(self, *_exc: object) -> None:
        self.recording = False
        gc.callbacks.remove(self)

    def summary(self) -> dict[str, Any]:
        return {"collections": [sum(1 for g, _, _ in self.events if g == gen) for gen in range(3)],
                "pause_ms": round(sum(d for _, _, d in self.events) * 1000, 2),
                "max_pause_ms": round(max((d for _, _, d in self.events), default=0.0) * 1000, 2)}


def _ms(values: list[float], digits: int = 2) -> dict[str, float]:
    return {"p50": _pct(values, 0.5, digits), "p95": _pct(values, 0.95, digits), "max": _pct(values, 1.0, digits)}


def live_states(size: int, branches: int, table: Path, budget_on: bool, interleave: bool = False,
                ) -> dict[str, Any]:
    """N live states in one sandbox; the branch time at that size.

    With the budget on, its check (``MemoryBudget.enforce``, once per branch) is timed on its own
    (``budget_check_ms``, ``budget_check_share_pct``: its share of the timed branches' wall time). ``interleave``
    (budget on only): every other timed branch runs with the sandbox out of the budget, so that both arms see the
    same machine (``ab_interleaved``). Attribution of a slow branch: CPU of this process, of the state branched
    from and of the new state (``cpu_ms``), their time waiting for a CPU (``runqueue_ms``), the rest of the wall
    time (``blocked_ms``: asleep, e.g. on a kernel lock), this process's garbage collections (``host_gc``) and
    the CPU of kernel threads (``kernel_threads_cpu_ms``); ``slow_branches`` averages them over the slowest 5 %."""
    config = SandboxConfig(timeout_s=300, max_live_states=size + branches + 8, max_processes=size + 256,
                           shared_memory_budget=budget_on)
    budget = _TimedBudget(1 << 50) if budget_on else None  # checked on every branch, never reached
    out: dict[str, Any] = {"states": size, "memory_budget": budget_on, "branches": branches}
    with Sandbox(config, memory_budget=budget) as box:
        root = box.open_root([table])
        _check(root.run(ROOT_CELL), "root")
        states = []
        started = time.perf_counter()
        try:
            for _ in range(size):
                child = root.branch()
                _check(child.run(CHILD_CELL), "child")
                states.append(child)
        except ProcessBudgetError as exc:
            out["error"] = str(exc)
        out["create_s"] = round(time.perf_counter() - started, 2)
        times = []
        arms: dict[bool, list[float]] = {True: [], False: []}
        checks: list[float] = []
        rows: list[dict[str, float]] = []
        threads = _kernel_threads()
        parent_pid = root.runtime_pid
        host_tid = threading.get_native_id()
        vm_before = _vmstat()
        threads_before = {name: sum(_schedstat(p)[0] for p in pids) for name, pids in threads.items()}
        with _GcPauses() as pauses:
            for i in range(branches):
                on = not (interleave and budget is not None and i % 2)
                box._budget = budget if on else None  # the off arm: the sandbox skips the budget's check
                calls = len(budget.calls) if budget is not None else 0
                kernel0 = sum(_schedstat(p)[0] for pids in threads.values() for p in pids)
                host0, parent0 = _schedstat(host_tid), _schedstat(parent_pid)
                t0 = time.perf_counter()
                child = root.branch()
                ex = child.run(CHILD_CELL)
                t1 = time.perf_counter()
                host1, parent1 = _schedstat(host_tid), _schedstat(parent_pid)
                kernel1 = sum(_schedstat(p)[0] for pids in threads.values() for p in pids)
                born = _schedstat(child.runtime_pid) if child.runtime_pid is not None else (0.0, 0.0)
                times.append(t1 - t0)
                arms[on].append(t1 - t0)
                if budget is not None and on:
                    checks.append(sum(budget.calls[calls:]))
                cpu = host1[0] - host0[0] + parent1[0] - parent0[0] + born[0]
                queued = host1[1] - host0[1] + parent1[1] - parent0[1] + born[1]
                rows.append({"wall": t1 - t0, "cpu": cpu, "queued": queued,
                             "blocked": max(0.0, t1 - t0 - cpu - queued), "kernel": kernel1 - kernel0,
                             "gc": sum(d for _, s, d in pauses.events if t0 <= s <= t1)})
                _check(ex, "timed child")
                child.close()
        box._budget = budget
        vm_after = _vmstat()
        threads_after = {name: sum(_schedstat(p)[0] for p in pids) for name, pids in threads.items()}
        stats = box.stats()
        pids = [s.runtime_pid for s in states if s.runtime_pid is not None]
        slow = sorted(rows, key=lambda r: r["wall"])[-max(1, len(rows) // 20):]
        out.update({
            "live_states": stats.live_states,
            "branch_ms_p50": _pct(times, 0.5), "branch_ms_p95": _pct(times, 0.95),
            "branch_ms_p99": _pct(times, 0.99), "branch_ms_max": _pct(times, 1.0),
            "uss_mb": round(sum(uss_bytes(p) for p in pids) / MB, 1),
            "pss_mb": round(sum(pss_bytes(p) for p in pids) / MB, 1),
            "uss_mb_per_state": round(sum(uss_bytes(p) for p in pids[:50]) / MB / max(1, min(50, len(pids))), 2),
            "memory_in_use_mb": round(box.memory_in_use() / MB, 1),
            "evictions": stats.evictions,
            "kernel_stalls": {key: vm_after[key] - vm_before.get(key, 0) for key in vm_after},
            "limit_reached": bool(stats.evictions or "error" in out or (budget is not None and budget.reached)),
            "cpu_ms": _ms([r["cpu"] for r in rows]), "runqueue_ms": _ms([r["queued"] for r in rows]),
            "blocked_ms": _ms([r["blocked"] for r in rows]),
            "host_gc": pauses.summary(),
            "kernel_threads_cpu_ms": {name: round((threads_after[name] - threads_before[name]) * 1000, 1)
                                      for name in threads},
            "slow_branches": {key: round(statistics.mean(r[key] for r in slow) * 1000, 2)
                              for key in ("wall", "cpu", "queued", "blocked", "kernel", "gc")},
        })
        if checks:
            out["budget_check_ms"] = _ms(checks, 4)  # tens of microseconds
            out["budget_check_share_pct"] = round(100 * sum(checks) / max(1e-9, sum(arms[True])), 2)
        if interleave and budget is not None:
            out["ab_interleaved"] = {f"{arm}_ms_{q}": _pct(arms[flag], v) for arm, flag in (("on", True),
                                     ("off", False)) for q, v in (("p50", 0.5), ("p95", 0.95))}
    return out


#: the most of one core that the PSS sampler of the engine part may take (it waits longer after a costly pass)
SAMPLER_SHARE = 0.05


class _Sampler:
    """Peak PSS and process count of this process tree, sampled on a thread."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.peak_pss = 0
        self.peak_processes = 0
        self.cpu_s = 0.0  # this thread's own CPU: reading every process's smaps costs the host (left out of it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scale-sampler", daemon=True)

    def _loop(self) -> None:
        wait = self.every_s
        while not self._stop.wait(wait):
            started = time.thread_time()
            # this process and every process below it (sandboxes' launchers, bubblewrap, runtimes, cells)
            pids = [os.getpid(), *(p.pid for p in psutil.Process().children(recursive=True))]
            self.peak_processes = max(self.peak_processes, len(pids))
            self.peak_pss = max(self.peak_pss, sum(pss_bytes(p) for p in pids))
            spent = time.thread_time() - started
            self.cpu_s += spent
            # reading every process's smaps is not free (on this 2-core VM a pass over ~180 processes every second
            # took a fifth of the run's CPU): the sampler takes at most SAMPLER_SHARE of one core
            wait = max(self.every_s, spent / SAMPLER_SHARE)

    def __enter__(self) -> _Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _CpuAccount:
    """CPU seconds of this process and every process it starts, from a v1 ``cpuacct`` group made for it (root).

    Why a group: the sandboxes' runtimes are not reaped up to this process (bubblewrap, the zygote's own
    reaping), so ``RUSAGE_CHILDREN`` misses them; the sandboxes use the ``cpu``, ``memory`` and ``pids``
    hierarchies and leave this one alone. ``seconds()`` is None where no such group can be made."""

    def __init__(self) -> None:
        from sandbox.runtime.limits import cgroup_parent

        self.path: Path | None = None
        parent = cgroup_parent("cpuacct")
        if parent is None or not (parent / "cpuacct.usage").exists():
            return
        path = parent / f"jupiter-scale-{os.getpid()}"
        try:
            path.mkdir()
            (path / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass
            return
        self.parent, self.path = parent, path

    def seconds(self) -> float | None:
        try:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9 if self.path is not None else None
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        if self.path is None:
            return
        try:
            (self.parent / "cgroup.procs").write_text(str(os.getpid()))
            self.path.rmdir()
        except OSError:
            pass


def trees(n: int, sample_s: float, seed: int, in_flight: int | None = None, fixed: bool = False,
          ) -> dict[str, Any]:
    """``n`` trees of the simulated policy at the default collect settings, a default sandbox per tree in flight
    (``sandboxes_made``: how many the engine's factory made; the engine resets a finished tree's for the next one).

    CPU: this process's own (``cpu_s_host``: the driver, the policy, the sandboxes' host side) and that of every
    process below it (``cpu_s_sandboxes``: the runtimes; None without a ``cpuacct`` group), per node; the PSS
    sampler's own CPU (``sampler_cpu_s``: it reads every process's smaps) is left out of both."""
    from benchmarks.perf.sim_policy import SimOptions, SimulatedPolicy, load_solutions, ordered_questions, tasks_for
    from search import Mode, SearchConfig, save_tree, solve_many

    questions = ordered_questions(load_solutions())
    dabench = default_data_dir("dabench")
    tasks = tasks_for(questions, dabench)
    tasks = [tasks[i % len(tasks)].replace(id=f"{tasks[i % len(tasks)].id}-{i}") for i in range(n)]
    config = SearchConfig(mode=Mode.COLLECT, max_trees_in_flight=in_flight,  # None: the paper profile's
                          fit_trees_to_memory=False if fixed else None)
    policy = SimulatedPolicy(questions, SimOptions())
    budget = process_budget()
    evictions_before = budget.evictions
    nodes = tree_bytes = finished = errors = 0
    made: list[Sandbox] = []

    def sandbox() -> Sandbox:
        box = Sandbox(SandboxConfig())
        made.append(box)
        return box

    account = _CpuAccount()
    with tempfile.TemporaryDirectory(prefix="jupiter-scale-") as tmp, _Sampler(sample_s) as sampler:
        started = time.perf_counter()
        host_before, all_before = _cpu_s(), account.seconds()
        in_flight_peak = 0

        def on_step(step: Any) -> None:
            nonlocal in_flight_peak
            in_flight_peak = max(in_flight_peak, step.active_trees)

        for result in solve_many(tasks, policy, sandbox, config, seed=seed, on_step=on_step):
            finished += 1
            errors += result.error is not None
            nodes += len(result.tree.nodes)
            path = save_tree(result.tree, Path(tmp) / f"{finished}.json")
            tree_bytes += path.stat().st_size
        wall = time.perf_counter() - started
        host_cpu = _cpu_s() - host_before - sampler.cpu_s
    all_after = account.seconds()  # the sandboxes are closed: their processes' CPU is all counted
    sandbox_cpu = (None if all_before is None or all_after is None
                   else all_after - all_before - host_cpu - sampler.cpu_s)
    account.close()
    counts = {key: sum(getattr(box.stats(), key) for box in made)
              for key in ("forks", "replays", "replayed_cells", "evictions", "timeouts", "deaths")}
    return {
        "trees": n, "finished": finished, "errors": errors, "nodes": nodes, "wall_s": round(wall, 1),
        "nodes_per_s": round(nodes / wall, 1) if wall else None,
        "cpu_s_host": round(host_cpu, 1),
        "cpu_s_sandboxes": None if sandbox_cpu is None else round(sandbox_cpu, 1),
        "cpu_ms_per_node": (None if sandbox_cpu is None
                            else round((host_cpu + sandbox_cpu) * 1000 / max(1, nodes), 1)),
        "host_cpu_ms_per_node": round(host_cpu * 1000 / max(1, nodes), 1),
        "sampler_cpu_s": round(sampler.cpu_s, 1),
        "peak_pss_mb": round(sampler.peak_pss / MB), "peak_processes": sampler.peak_processes,
        "tree_bytes_per_node": round(tree_bytes / max(1, nodes)),
        "max_trees_in_flight": config.max_trees_in_flight, "fit_trees_to_memory": config.fit_trees_to_memory,
        "peak_trees_in_flight": in_flight_peak, "iterations": config.iterations,
        "expansions": config.expansions,
        "memory_budget_mb": budget.limit_bytes // MB, "budget_evictions": budget.evictions - evictions_before,
        "budget_peak_mb": round(budget.peak_bytes / MB), "sandboxes_made": len(made), "sandboxes": counts,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only mode)")
    parser.add_argument("--full", action="store_true", help="the issue's sizes: 100/300/500/1,000 states, 100 trees")
    parser.add_argument("--sizes", default=None,
                        help="comma-separated live-state sizes (default 100,300; '' skips the part)")
    parser.add_argument("--branches", type=int, default=200,
                        help="timed branches per size (default 200: the p95 is then the 10th slowest, not the 2nd)")
    parser.add_argument("--budget-ab", action="store_true",
                        help="each size with the memory budget on and off (the check's cost)")
    parser.add_argument("--interleave", action="store_true",
                        help="in the runs with the memory budget on, every other timed branch without it (one "
                             "sandbox, both arms on the same machine: ab_interleaved)")
    parser.add_argument("--trees", type=int, default=None, help="trees of the engine part (default 8; 0: skip)")
    parser.add_argument("--in-flight", type=int, default=None,
                        help="trees in flight of the engine part (default: the collect settings' own)")
    parser.add_argument("--fixed-trees", action="store_true",
                        help="always max_trees_in_flight trees, whatever the memory budget holds")
    parser.add_argument("--sample-s", type=float, default=1.0,
                        help="PSS sampling period of the engine part (longer when a pass would take more than "
                             "SAMPLER_SHARE of a core)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    table = default_data_dir("dabench") / "tables" / TABLE
    if not table.exists():
        raise SystemExit(f"scale: benchmark table not found: {table} (set JUPITER_SHARED)")
    default_sizes = "100,300,500,1000" if args.full else "100,300"
    sizes = [int(s) for s in (default_sizes if args.sizes is None else args.sizes).split(",") if s]
    n_trees = args.trees if args.trees is not None else (100 if args.full else 8)
    result: dict[str, Any] = {"live_states": []}
    for size in sizes:
        for budget_on in ((True, False) if args.budget_ab else (True,)):
            result["live_states"].append(live_states(size, args.branches, table, budget_on, args.interleave))
    if n_trees > 0:
        result["trees"] = trees(n_trees, args.sample_s, args.seed, args.in_flight, args.fixed_trees)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
