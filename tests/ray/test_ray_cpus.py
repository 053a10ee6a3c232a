"""Tree workers pinned to the cores they declare (``search.ray_cpus``), their sandboxes included.

The lock folder is the test's own (``$JUPITER_CPU_LOCK_DIR``), so workers of other tests running at the same time
(which pin into the default folder) never take these cores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_fixtures import write_replay, write_tasks

from jupiter.task import load_tasks
from search import Mode, SearchConfig
from search.ray_cpus import LOCK_DIR_ENV
from search.ray_driver import RayResources, solve_tasks_ray

psutil = pytest.importorskip("psutil")
REPO = Path(__file__).resolve().parents[2]
CORES = sorted(os.sched_getaffinity(0))
needs_two_cores = pytest.mark.skipif(len(CORES) < 2, reason="pinning two workers apart needs two cores")

# A process that pins itself to one core, starts a child (as the sandbox's launcher does: fork + exec), prints
# what it got and the child's mask as JSON, and then waits for stdin to close (it holds its core until then).
_PINNER = """
import json, os, subprocess, sys
from search.ray_cpus import pin_process
pin = pin_process(float(sys.argv[1]))
child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                       capture_output=True, text=True, check=True).stdout
threads = sorted({tuple(sorted(os.sched_getaffinity(int(t)))) for t in os.listdir("/proc/self/task")})
print(json.dumps({"cores": pin.cores, "pinned": pin.pinned, "reason": pin.reason, "child": json.loads(child),
                  "threads": threads}), flush=True)
sys.stdin.read()
"""


def _pinner(lock_dir: Path, cpus: float = 1) -> tuple[subprocess.Popen, dict]:
    env = dict(os.environ, **{LOCK_DIR_ENV: str(lock_dir)}, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", _PINNER, str(cpus)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    assert proc.stdout is not None
    return proc, json.loads(proc.stdout.readline())


def _end(proc: subprocess.Popen) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=30)


@needs_two_cores
def test_processes_share_out_the_cores_and_a_dead_one_frees_its_core(tmp_path):
    first, a = _pinner(tmp_path)
    second, b = _pinner(tmp_path)
    try:
        assert a["pinned"] and b["pinned"] and len(a["cores"]) == len(b["cores"]) == 1
        assert set(a["cores"]).isdisjoint(b["cores"])
        assert a["child"] == a["cores"] and b["child"] == b["cores"]  # inherited through fork + exec
        assert a["threads"] == [a["cores"]]  # every thread of the process, not only the calling one
        if len(CORES) == 2:  # every core taken: a third process stays unpinned and says why
            third, c = _pinner(tmp_path)
            _end(third)
            assert not c["pinned"] and c["cores"] == CORES and "held by other workers" in c["reason"]
        first.kill()  # however a worker ends, the kernel drops its lock
        first.wait(timeout=30)
        again, d = _pinner(tmp_path)
        _end(again)
        assert d["pinned"] and d["cores"] == a["cores"]
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                _end(proc)


def test_a_fraction_of_a_cpu_is_not_pinned(tmp_path):
    proc, got = _pinner(tmp_path, 0.5)
    _end(proc)
    assert not got["pinned"] and got["cores"] == CORES and "whole number" in got["reason"]


@pytest.fixture(scope="module")
def ray_pinned(tmp_path_factory):
    """A private Ray with 2 logical CPUs whose workers pin into this module's own lock folder."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    locks = tmp_path_factory.mktemp("cpu-locks")
    temp = Path("/tmp") / f"jp-{os.getpid()}"  # short: Ray's socket paths must fit in 107 bytes
    ray.init(address="local", num_cpus=2, include_dashboard=False, _temp_dir=str(temp), logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), LOCK_DIR_ENV: str(locks)}})
    yield ray
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


def _masks(pid: int) -> tuple[tuple[int, ...], set[tuple[int, ...]]]:
    """The CPU mask of process ``pid`` and the masks of all its live descendants."""
    own = tuple(sorted(os.sched_getaffinity(pid)))
    below: set[tuple[int, ...]] = set()
    for child in psutil.Process(pid).children(recursive=True):
        try:
            below.add(tuple(sorted(os.sched_getaffinity(child.pid))))
        except OSError:  # it ended meanwhile
            continue
    return own, below


@needs_two_cores
def test_two_ray_workers_and_their_sandboxes_each_stay_on_one_core(ray_pinned, tmp_path):
    """Real workers, real sandboxes: while trees are in flight, each worker's process tree (zygote, states, cells)
    may run on its one core only, and the two workers' cores differ."""
    tasks = load_tasks(write_tasks(tmp_path / "tasks", n=6))
    replay = write_replay(tmp_path / "tasks", n=6, cell_seconds=0.3)
    config = SearchConfig(mode=Mode.COLLECT, iterations=4, temperature=1.0, max_trees_in_flight=2, cell_timeout=60)
    seen: dict[int, tuple[tuple[int, ...], set[tuple[int, ...]]]] = {}

    def look(outcome) -> None:  # in the driver, while the worker's other tree and its sandboxes are still live
        own, below = _masks(outcome.pid)
        seen.setdefault(outcome.pid, (own, set()))[1].update(below)

    started = time.monotonic()
    summary = solve_tasks_ray(tasks, f"replay:{replay}", config, tmp_path / "out", workers=2, progress=False,
                              on_outcome=look, resources=RayResources(worker_memory_mb=512))
    assert summary.done == 6 and summary.workers == 2, summary
    assert len(seen) == 2, f"outcomes came from {len(seen)} worker process(es) in {time.monotonic() - started:.0f} s"
    (own_a, below_a), (own_b, below_b) = seen.values()
    assert len(own_a) == len(own_b) == 1 and own_a != own_b
    assert below_a == {own_a} and below_b == {own_b}  # sandbox processes were seen, all on their worker's core


def test_unpinned_workers_keep_every_core(ray_pinned, tmp_path):
    tasks = load_tasks(write_tasks(tmp_path / "tasks", n=2))
    replay = write_replay(tmp_path / "tasks", n=2)
    config = SearchConfig(mode=Mode.COLLECT, iterations=3, temperature=1.0, max_trees_in_flight=1, cell_timeout=60)
    masks = []
    summary = solve_tasks_ray(tasks, f"replay:{replay}", config, tmp_path / "out", workers=1, progress=False,
                              on_outcome=lambda o: masks.append(_masks(o.pid)[0]),
                              resources=RayResources(worker_memory_mb=512, pin_cpus=False))
    assert summary.done == 2 and masks and all(m == tuple(CORES) for m in masks)
