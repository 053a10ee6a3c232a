"""What checkpointing a tree in flight costs: one save and one load of real trees, as a run makes them.

    python benchmarks/perf/checkpoint_save.py TREE.json [TREE.json ...] [--repeat 5] [--json]

Each TREE.json is a saved tree (``trees/<id>.json`` of a ``jupiter bench`` run, or ``tree.json`` of a solve).
A run in flight rewrites each tree's checkpoint at most every ``--checkpoint-every`` seconds (30 by default,
``search.checkpoints``); this measures one such write (``TreeCheckpoints.save``: the tree file's layout, the
counters, an atomic replace) and the read a rerun makes (``TreeCheckpoints.load``). Prints one JSON object:
per tree its nodes, the checkpoint's bytes and the median save and load milliseconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def measure(path: Path, repeat: int) -> dict:
    from jupiter.task import Task
    from search.checkpoints import TreeCheckpoints
    from search.result import SearchStats
    from search.tree_io import load_tree

    tree = load_tree(path)
    task = tree.task if tree.task is not None else Task(id=path.stem, question="?", format="@x[value]")
    saves, loads = [], []
    with tempfile.TemporaryDirectory() as folder:
        checkpoints = TreeCheckpoints(Path(folder))
        for _ in range(repeat):
            started = time.perf_counter()
            written = checkpoints.save(task.id, tree, SearchStats(iterations=40, nodes=len(tree.nodes)))
            saves.append(time.perf_counter() - started)
            started = time.perf_counter()
            saved = checkpoints.load(task)
            loads.append(time.perf_counter() - started)
            assert saved is not None and len(saved.tree.nodes) == len(tree.nodes)
        size = written.stat().st_size
    return {"tree": path.name, "nodes": len(tree.nodes), "bytes": size,
            "save_ms": round(statistics.median(saves) * 1000, 2), "load_ms": round(statistics.median(loads) * 1000, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="tree files")
    parser.add_argument("--repeat", type=int, default=5, help="saves and loads per tree (the median is printed)")
    parser.add_argument("--json", action="store_true", help="the JSON object on one line")
    args = parser.parse_args(argv)
    rows = [measure(path, args.repeat) for path in args.trees]
    print(json.dumps({"benchmark": "checkpoint_save", "repeat": args.repeat, "trees": rows,
                      "save_ms_max": max(r["save_ms"] for r in rows), "load_ms_max": max(r["load_ms"] for r in rows)},
                     indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
