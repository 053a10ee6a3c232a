"""Benchmark: cost of branching a notebook state and running one cell, fork backend vs replay backend.

Workload: a realistic analysis path on a DABench table (load, clean, feature engineering, plots, a
scikit-learn fit). For depth d in {1, 5, 10}: median time per child to ``branch()`` a state at depth d and run
one cell in the child (K children per state), for the fork backend and for the replay (jupyter_client) backend;
the time of the same cell run in an existing state; memory per live state.

``branch_cpu_ms_d*``: CPU time of one branch (host + forking state + new state), comparable on a loaded machine.

``ahead_ms_d*``: the same child's branch and cell when the branches were asked for ahead (``State.prefetch``, as the
search does when it asks the policy for K cells) and made while the policy would generate (``--generate-s``):
what remains of branching on the search's critical path. The bar (1.2 x cell + 20 ms at depth 10) is checked on
it (``target_fork_le_1_2_cell_plus_20ms``) and on the synchronous branch (``target_sync_fork_...``).

Usage: ``python benchmarks/perf/sandbox_branching.py --json`` prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.paths import default_data_dir  # noqa: E402
from sandbox import Sandbox, SandboxConfig  # noqa: E402
from sandbox.runtime.base import uss_bytes  # noqa: E402

TABLE = "Credit.csv"
PATH = [
    "import numpy as np\nimport pandas as pd\ndf = pd.read_csv('Credit.csv', index_col=0)\ndf.head()",
    "df = df.dropna()\nfor col in ['Gender', 'Student', 'Married', 'Ethnicity']:\n"
    "    df[col] = df[col].astype(str).str.strip()\ndf.describe()",
    "big = pd.concat([df] * 200, ignore_index=True)\nbig['Income_log'] = np.log1p(big['Income'])\n"
    "big['Util'] = big['Balance'] / big['Limit']\nbig.shape",
    "import matplotlib.pyplot as plt\nbig['Income'].hist(bins=30)\nplt.title('Income')\nplt.show()",
    "X = pd.get_dummies(big.drop(columns=['Balance']), drop_first=True).astype(float)\ny = big['Balance']\nX.shape",
    "from sklearn.model_selection import train_test_split\n"
    "Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0)\nlen(Xtr), len(Xte)",
    "from sklearn.ensemble import RandomForestRegressor\n"
    "model = RandomForestRegressor(n_estimators=20, max_depth=8, n_jobs=1, random_state=0).fit(Xtr, ytr)\n"
    "round(model.score(Xte, yte), 4)",
    "corr = big.select_dtypes('number').corr()\nplt.imshow(corr, cmap='viridis')\nplt.colorbar()\nplt.show()",
    "importances = pd.Series(model.feature_importances_, index=X.columns).sort_values(ascending=False)\n"
    "importances.head()",
    "preds = model.predict(Xte)\nprint('rmse', float(np.sqrt(np.mean((preds - yte) ** 2))))",
]
PROBE = "df.groupby('Ethnicity')['Balance'].agg(['mean', 'count'])"
DEPTHS = (1, 5, 10)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def _check(ex, what: str) -> None:
    if not ex.ok:
        raise SystemExit(f"benchmark cell failed ({what}): {ex.status.value}: {ex.observation()}")


def build_path(box: Sandbox, table: Path, depth: int):
    state = box.open_root([table])
    for code in PATH[:depth]:
        _check(state.run(code), code.splitlines()[0])
    return state


def branch_times(state, k: int, rounds: int = 1, generate_s: float | None = None) -> list[float]:
    """Per child: ``branch()`` + its first cell. ``generate_s``: the K branches of each round are asked for
    (``State.prefetch``) that long before, as the search does while the policy generates."""
    times = []
    for _ in range(rounds):
        if generate_s is not None:
            state.prefetch(k)
            time.sleep(generate_s)
        for _ in range(k):
            t0 = time.perf_counter()
            child = state.branch()
            ex = child.run(PROBE)
            times.append(time.perf_counter() - t0)
            _check(ex, "probe in child")
            child.close()
    return times


def _sched_ns(pid: int) -> int:
    """Nanoseconds a process has run on a CPU (``/proc/<pid>/schedstat``), 0 if gone."""
    try:
        with open(f"/proc/{pid}/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def branch_cpu_ms(state, n: int) -> float:
    """CPU time of one ``branch()`` (no cell): the host process, the forking state and the new state until it
    greets, mean over ``n``. CPU rather than wall time: it stays comparable on a shared, loaded machine, where the
    wall times swing by 10x."""
    parent = state.runtime_pid
    total = 0
    for _ in range(n):
        host0, parent0 = time.process_time_ns(), _sched_ns(parent)
        child = state.branch()
        total += (time.process_time_ns() - host0) + (_sched_ns(parent) - parent0) + _sched_ns(child.runtime_pid)
        child.close()
    return round(total / n / 1e6, 3)


def cell_times(state, k: int) -> list[float]:
    probe_state = state.branch()
    times = []
    for _ in range(k):
        t0 = time.perf_counter()
        _check(probe_state.run(PROBE), "probe in state")
        times.append(time.perf_counter() - t0)
    probe_state.close()
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only mode)")
    parser.add_argument("-k", type=int, default=3, help="children per state (default 3)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of K children per fork measurement; the median is over all (default 5)")
    parser.add_argument("--generate-s", type=float, default=0.5,
                        help="seconds between asking for K branches ahead and taking them: the policy's reply "
                             "time (seconds with a real model; default 0.5)")
    parser.add_argument("--skip-replay", action="store_true", help="measure the fork backend only")
    parser.add_argument("--no-huge-pages", action="store_true",
                        help="4 KiB pages for the runtime heap (SandboxConfig.huge_pages=False), for comparison")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="a SandboxConfig field of the fork backend, to measure what a guarantee costs per "
                             "branch (isolation=none: no bubblewrap, no own views; state_cgroups=false: no per-state "
                             "cgroups); repeatable")
    args = parser.parse_args(argv)
    overrides = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep or name not in SandboxConfig.model_fields:
            parser.error(f"--set {item!r}: give FIELD=VALUE with a SandboxConfig field")
        overrides[name] = {"true": True, "false": False}.get(value.lower(), value)
    table = default_data_dir("dabench") / "tables" / TABLE
    if not table.exists():
        raise SystemExit(f"benchmark table not found: {table} (set JUPITER_SHARED)")
    result: dict[str, object] = {"table": TABLE, "k": args.k, "rounds": args.rounds, "depths": list(DEPTHS)}
    result["huge_pages"] = not args.no_huge_pages
    result["generate_s"] = args.generate_s
    result["settings"] = {k: str(v) for k, v in overrides.items()}
    with Sandbox(SandboxConfig(timeout_s=300, huge_pages=not args.no_huge_pages, **overrides)) as box:
        result["isolated"] = box.isolation.bwrap
        for d in DEPTHS:
            state = build_path(box, table, d)
            fork = branch_times(state, args.k, args.rounds)
            cell = cell_times(state, args.k)
            result[f"fork_ms_d{d}"] = _ms(statistics.median(fork))
            ahead = branch_times(state, args.k, args.rounds, args.generate_s)
            result[f"ahead_ms_d{d}"] = _ms(statistics.median(ahead))
            result[f"cell_ms_d{d}"] = _ms(statistics.median(cell))
            result[f"branch_cpu_ms_d{d}"] = branch_cpu_ms(state, args.k * args.rounds)
            if d == DEPTHS[-1]:
                children = [state.branch() for _ in range(8)]
                for child in children:
                    _check(child.run(PROBE), "probe for memory")
                uss = [uss_bytes(c.runtime_pid) for c in children]
                rss = []
                for c in children:
                    with open(f"/proc/{c.runtime_pid}/status", encoding="ascii") as fh:
                        rss += [int(line.split()[1]) * 1024 for line in fh if line.startswith("VmRSS:")]
                result["uss_mb_per_state"] = round(statistics.mean(uss) / 2**20, 2)
                result["rss_mb_per_state"] = round(statistics.mean(rss) / 2**20, 2)
                result["uss_mb_state_d10"] = round(uss_bytes(state.runtime_pid) / 2**20, 2)
            state.close()
        result["fork_stats"] = {k: v for k, v in vars(box.stats()).items()
                                if isinstance(v, int) and not isinstance(v, bool)}
    if not args.skip_replay:
        with Sandbox(SandboxConfig(backend="kernel", timeout_s=300)) as box:
            for d in DEPTHS:
                state = build_path(box, table, d)
                result[f"replay_ms_d{d}"] = _ms(statistics.median(branch_times(state, args.k)))
                state.close()
        for d in DEPTHS:
            result[f"speedup_d{d}"] = round(result[f"replay_ms_d{d}"] / result[f"fork_ms_d{d}"], 1)
    d = DEPTHS[-1]
    bar = 1.2 * result[f"cell_ms_d{d}"] + 20
    result["target_fork_le_1_2_cell_plus_20ms"] = result[f"ahead_ms_d{d}"] <= bar
    result["target_sync_fork_le_1_2_cell_plus_20ms"] = result[f"fork_ms_d{d}"] <= bar
    if not args.skip_replay:
        result["target_speedup_ge_20"] = result[f"speedup_d{d}"] >= 20
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
