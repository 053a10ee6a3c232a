"""Engine overhead of the search: time per node beyond the cell's own run, and model calls per step.

Runs the real driver with the real replay policy (instant replies) and trivial cells, twice:
- ``null``: an in-process notebook whose cells cost nothing (``_NullNotebook``: every cell runs OK, printing
  nothing), so all measured time is the engine's (selection, message building, parsing, back-up, bookkeeping);
  target ≤ 5 ms per node;
- ``sandbox``: the real fork sandbox, reporting the time per node beyond the cells' own run and the
  sandbox start-up (this includes branching and releasing states, which the sandbox does). It runs one cell
  and opens one sandbox at a time: with the default concurrency, summed cell and start-up times overlap and
  the subtraction goes negative.
It also checks batching: with several trees, the policy is called once per driver step.

    python benchmarks/perf/engine_overhead.py --json [--trees 8] [--iterations 60] [--no-sandbox]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass

from jupiter.llm import ReplayPolicy
from jupiter.task import Task
from sandbox import ExecStatus
from search import SearchConfig, solve_many

STEP = "Thought: keep going.\nAction:\n```python\nx = {i}\n```"
REPLIES = [STEP.format(i=i) for i in range(3)] + ["Thought: done.\nFormatted answer: @x[1]"]


@dataclass(frozen=True)
class _Ran:
    """What a cell of the null notebook gives: OK, no output."""

    status: ExecStatus = ExecStatus.OK
    outputs: tuple = ()
    ok: bool = True
    dropped_chars: int = 0

    def observation(self, max_chars: int | None = None) -> str:
        return ""


class _NullState:
    def branch(self) -> _NullState:
        return _NullState()

    def run(self, code: str, timeout: float | None = None) -> _Ran:
        return _Ran()

    def close(self) -> None:
        pass


class _NullNotebook:
    """A notebook whose cells run instantly and print nothing: the search's own cost, with nothing else."""

    def open_root(self, input_files=()) -> _NullState:
        return _NullState()

    def close(self) -> None:
        pass


class _TimedSandbox:
    """Counts the time spent creating sandboxes and opening roots: start-up, not per-node overhead."""

    def __init__(self, factory, setup: list[float]) -> None:
        started = time.perf_counter()
        self.inner = factory()
        self.setup = setup
        setup.append(time.perf_counter() - started)

    def open_root(self, input_files=()):
        started = time.perf_counter()
        root = self.inner.open_root(input_files=input_files)
        self.setup.append(time.perf_counter() - started)
        return root

    def close(self) -> None:
        self.inner.close()


def measure(trees: int, iterations: int, factory, concurrency: int | None = None) -> dict:
    setup: list[float] = []
    policy = ReplayPolicy(default=REPLIES)
    tasks = [Task(id=f"t{i}", question=f"Task number {i}", format="@x[value]") for i in range(trees)]
    config = SearchConfig(iterations=iterations, expansions=3, max_depth=10, max_trees_in_flight=trees)
    if concurrency is not None:
        config = config.replace(max_concurrent_cells=concurrency)
    steps = []
    started = time.perf_counter()
    results = list(solve_many(tasks, policy, lambda: _TimedSandbox(factory, setup), config, seed=0,
                              on_step=steps.append))
    wall = time.perf_counter() - started
    nodes = sum(r.stats.nodes - 1 for r in results)
    cells = sum(r.stats.kernel_seconds for r in results)
    model = policy.stats().seconds
    return {
        "trees": trees,
        "iterations_per_tree": iterations,
        "nodes": nodes,
        "steps": len(steps),
        "model_calls": policy.stats().calls,
        "model_calls_per_step": round(policy.stats().calls / max(1, len(steps)), 3),
        "requests_per_step": round(sum(s.requests for s in steps) / max(1, len(steps)), 2),
        "wall_s": round(wall, 3),
        "cell_s": round(cells, 3),
        "model_s": round(model, 3),
        "setup_s": round(sum(setup), 3),
        "engine_ms_per_node": round(1000 * (wall - cells - model - sum(setup)) / max(1, nodes), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output)")
    parser.add_argument("--trees", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--no-sandbox", action="store_true", help="skip the real-sandbox measurement")
    args = parser.parse_args(argv)
    report = {"benchmark": "engine_overhead", "target_engine_ms_per_node": 5.0, "target_model_calls_per_step": 1}
    report["null"] = measure(args.trees, args.iterations, _NullNotebook)
    if not args.no_sandbox:
        from sandbox import Sandbox, SandboxConfig

        report["sandbox"] = measure(2, max(10, args.iterations // 4), lambda: Sandbox(SandboxConfig()),
                                    concurrency=1)
    report["ok"] = (report["null"]["engine_ms_per_node"] <= 5.0 and report["null"]["model_calls_per_step"] == 1)
    json.dump(report, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
