"""Look inside saved trees: why did a tree miss the right answer although it was among its candidates?

For every tree file (``search_vs_baselines.py --keep-trees DIR``) it measures the vote table (right answer's
votes vs the winner's), where the answers sit (depth, which root branch), how the visits were spread, how many
sibling replies were merged as duplicates, and how many expansions went into erroring or dead branches.

    python -m benchmarks.quality.inspect_trees DIR [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from jupiter.answers import canonical_answer, reward
from search import NodeStatus, load_tree

__all__ = ["inspect_tree", "summarize", "main"]


def inspect_tree(path: Path, label: str) -> dict[str, Any]:
    """Figures of one saved tree against ``label`` (the tree file keeps the task, so its label is there too)."""
    tree = load_tree(path)
    votes: Counter[str] = Counter()
    right_keys: set[str] = set()
    depths = []
    branches: Counter[str] = Counter()
    for node in tree.answers():
        key = canonical_answer(node.final_answer or "")
        votes[key] += max(1, int(node.multiplicity))
        depths.append(node.depth)
        branches[node.tag.split(".")[0]] += 1
        if reward(node.final_answer, label) == 1.0:
            right_keys.add(key)
    nodes = [n for n in tree.nodes if n.status is not NodeStatus.ROOT]
    expanded = [n for n in tree.nodes if n.expanded]
    ranked = votes.most_common()
    right_votes = sum(votes[k] for k in right_keys)
    top_wrong = max((v for k, v in votes.items() if k not in right_keys), default=0)
    values = sorted({round(n.value, 4) for n in nodes if n.visit_count})
    return {
        "task_id": tree.task.id if tree.task is not None else path.stem,
        "nodes": len(nodes),
        "expansions": len(expanded),
        "answers": len(tree.answers()),
        "votes_total": sum(votes.values()),
        "right_votes": right_votes,
        "top_wrong_votes": top_wrong,
        "winner": ranked[0][0] if ranked else None,
        "right_won": bool(ranked) and ranked[0][0] in right_keys and right_votes > top_wrong,
        "in_tree": bool(right_keys),
        "answer_depths": sorted(depths),
        "answers_per_root_branch": dict(branches),
        "root_children": len(tree.root.children),
        "duplicate_votes": sum(max(1, int(n.multiplicity)) - 1 for n in nodes),
        "code_errors": sum(n.status is NodeStatus.CODE_ERROR for n in nodes),
        "expansions_of_error_nodes": sum(n.status is NodeStatus.CODE_ERROR for n in expanded),
        "dead_ends": sum(1 for n in nodes if n.is_terminal and not n.is_answer),
        "distinct_q_values": values[:8],
        "root_visits": tree.root.visit_count,
    }


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts over trees: how many had the right answer, how many it won, and how the misses lost."""
    in_tree = [r for r in rows if r["in_tree"]]
    lost = [r for r in in_tree if not r["right_won"]]
    return {
        "trees": len(rows),
        "in_tree": len(in_tree),
        "right_won": sum(r["right_won"] for r in rows),
        "lost_although_in_tree": [{k: r[k] for k in ("task_id", "right_votes", "top_wrong_votes", "answers",
                                                     "votes_total")} for r in lost],
        "mean_answers": round(sum(r["answers"] for r in rows) / max(1, len(rows)), 2),
        "mean_votes": round(sum(r["votes_total"] for r in rows) / max(1, len(rows)), 2),
        "mean_nodes": round(sum(r["nodes"] for r in rows) / max(1, len(rows)), 2),
        "mean_expansions_of_error_nodes": round(sum(r["expansions_of_error_nodes"] for r in rows) /
                                                max(1, len(rows)), 2),
        "trees_with_no_answer": sum(r["answers"] == 0 for r in rows),
        "distinct_q_values_seen": sorted({v for r in rows for v in r["distinct_q_values"]})[:12],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder of tree files (one per task)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for path in sorted(args.folder.glob("*.json"), key=lambda p: (len(p.stem), p.stem)):
        tree = load_tree(path)
        if tree.task is None or tree.task.label is None:
            print(f"{path}: no task label in the tree file; skipped", file=sys.stderr)
            continue
        rows.append(inspect_tree(path, tree.task.label))
    report = {"summary": summarize(rows), "trees": rows}
    if args.json:
        print(json.dumps(report))
    else:
        print(json.dumps(report["summary"], indent=1))
        for row in rows:
            print(f"{row['task_id']:>5} in_tree={row['in_tree']!s:5} won={row['right_won']!s:5} "
                  f"right={row['right_votes']} top_wrong={row['top_wrong_votes']} answers={row['answers']} "
                  f"nodes={row['nodes']} depths={row['answer_depths']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
