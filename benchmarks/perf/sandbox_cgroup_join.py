"""Benchmark: what moving a new state into its own cgroups costs on the branch's critical path, two ways.

``host``: the parent forks, the host writes the child's pid into ``cgroup.procs`` of a new pids group and a new
memory group (how the sandbox did it before): the kernel takes ``cgroup_threadgroup_rwsem`` for writing and waits
for an RCU grace period. ``self``: the host opens the groups' v1 ``tasks`` files and the child writes ``0`` into
each (how ``sandbox._server._join_own_groups`` does it now): a single-threaded process moving itself skips that
lock. Each sample is fork -> child in both groups (checked) -> parent told, in wall milliseconds; the two ways are
interleaved so that both see the same load. Needs root and the v1 pids and memory hierarchies (else it says so).

Usage: ``python benchmarks/perf/sandbox_cgroup_join.py --json`` prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from sandbox.limits import cgroup_parent  # noqa: E402


def _one(way: str, pids_parent: Path, memory_parent: Path, n: int) -> float:
    groups = [parent / f"jupiter-join-bench-{os.getpid()}-{way}-{n}" for parent in (pids_parent, memory_parent)]
    for group in groups:
        group.mkdir()
    tasks = [os.open(g / "tasks", os.O_WRONLY | os.O_CLOEXEC) for g in groups] if way == "self" else []
    ready_r, ready_w = os.pipe()
    started = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        try:
            for fd in tasks:
                os.write(fd, b"0")
            os.write(ready_w, b"x")
            time.sleep(30)
        finally:
            os._exit(0)
    os.read(ready_r, 1)
    if way == "host":
        for group in groups:
            (group / "cgroup.procs").write_text(str(pid))
    elapsed = time.perf_counter() - started
    inside = all(str(pid) in (g / "cgroup.procs").read_text().split() for g in groups)
    for fd in (*tasks, ready_r, ready_w):
        os.close(fd)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    for group in groups:
        for _ in range(500):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.01)
    if not inside:
        raise SystemExit(f"sandbox_cgroup_join: the child is not in its groups ({way})")
    return elapsed * 1000.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object (the only mode)")
    parser.add_argument("-n", type=int, default=30, help="samples per way (default 30)")
    args = parser.parse_args(argv)
    pids_parent, memory_parent = cgroup_parent("pids"), cgroup_parent("memory")
    if os.geteuid() != 0 or pids_parent is None or memory_parent is None or \
            not (pids_parent / "tasks").exists() or not (memory_parent / "tasks").exists():
        print(json.dumps({"skipped": "needs root and the v1 pids and memory hierarchies"}))
        return 0
    times: dict[str, list[float]] = {"host": [], "self": []}
    for n in range(args.n):
        for way in ("host", "self"):
            times[way].append(_one(way, pids_parent, memory_parent, n))
    out: dict[str, object] = {"n": args.n, "loadavg_1m": float(Path("/proc/loadavg").read_text().split()[0])}
    for way, values in times.items():
        values.sort()
        out[f"{way}_ms_p50"] = round(statistics.median(values), 2)
        out[f"{way}_ms_p95"] = round(values[int(0.95 * (len(values) - 1))], 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
