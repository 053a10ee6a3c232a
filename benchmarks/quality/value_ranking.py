"""Does a value model tell right from wrong *within a question*? Its ranking of a DABench run's tree nodes.

The search gains from a value model only where the model orders the nodes of one tree: with c_puct 0 the tree
follows the estimates, and the value decision takes the highest one. An AUC over all the nodes of a run mixes
that with how hard each question is (a model that only learned "easy questions end well" scores above chance
there and helps no tree), so this reports both, for two kinds of node of a run's saved trees:

- ``answer``: the answer nodes, right or wrong against the DABench label;
- ``live``: the nodes whose cell ran and that are not an answer or a failure, "right" when a right answer lies
  below them in the tree.

For each kind: the AUC over all nodes, and the AUC over pairs (right, wrong) from the same tree, with the number
of trees that hold both. For answers also the trees whose highest estimate is right, against those whose vote
is right. The estimates are the ones the trees stored (a run made with ``--value-model``) or, for a run made
without one, scored afterwards by ``jupiter value score``:

    python benchmarks/quality/value_ranking.py RUN [--json]
    python benchmarks/quality/value_ranking.py RUN --write-states STATES.jsonl [--kind live] [--mixed-only]
    jupiter value score MODEL STATES.jsonl -o SCORES.jsonl
    python benchmarks/quality/value_ranking.py RUN --scores SCORES.jsonl [--json]

In a tree grown by the value model itself, the ``live`` figures flatter it: the search only expands where the
estimates are high, so the right answers it finds lie under high estimates. Score a run made without the model
(second form) for a fair reading.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from benchmarks.dabench import dabench_correct, load_dabench
from benchmarks.paths import default_data_dir
from benchmarks.quality.value_probe import auc
from search.decide import decide
from search.tree import Node, NodeStatus, Tree
from search.tree_io import load_tree

__all__ = ["RankedNode", "KindReport", "ranked_nodes", "kind_report", "decisions", "main"]

KINDS = ("answer", "live")


@dataclass(frozen=True)
class RankedNode:
    """One node to rank: which tree, which kind, whether it is right (or leads to a right answer), its estimate."""

    tree: str
    tag: str
    kind: str  # "answer" or "live"
    right: bool
    value: float | None  # the value model's estimate; None when the node has none


@dataclass(frozen=True)
class KindReport:
    """How well the estimates order one kind of node."""

    kind: str
    nodes: int  # nodes of this kind with an estimate
    right: int
    auc: float | None  # over all nodes of the run
    within_tree_auc: float | None  # over (right, wrong) pairs from the same tree
    pairs: int
    mixed_trees: int  # trees holding both a right and a wrong node of this kind


def _is_live(node: Node) -> bool:
    return node.status in (NodeStatus.CODE_OK, NodeStatus.CODE_ERROR) and not node.is_terminal


def _targets(nodes: Sequence[RankedNode]) -> list[float]:
    """+1 / -1 per node, as ``value_probe.auc`` takes them."""
    return [1.0 if n.right else -1.0 for n in nodes]


def _mixed_groups(nodes: Iterable[RankedNode]) -> list[list[RankedNode]]:
    """The nodes grouped by tree, keeping the trees that hold both a right and a wrong one."""
    by_tree: dict[str, list[RankedNode]] = {}
    for node in nodes:
        by_tree.setdefault(node.tree, []).append(node)
    return [group for group in by_tree.values() if len({n.right for n in group}) == 2]


def ranked_nodes(tree_id: str, tree: Tree, label: Mapping[str, Any] | None) -> list[RankedNode]:
    """The answer and live nodes of one tree with their estimates (``Node.evaluation``)."""
    right_below: dict[int, bool] = {}

    def leads_right(node: Node) -> bool:
        if id(node) not in right_below:
            if node.is_answer:
                right_below[id(node)] = dabench_correct(node.final_answer, label)
            else:
                right_below[id(node)] = any(leads_right(child) for child in node.children)
        return right_below[id(node)]

    out = []
    for node in tree:
        if node.is_answer:
            out.append(RankedNode(tree_id, node.tag, "answer", leads_right(node), node.evaluation))
        elif _is_live(node):
            out.append(RankedNode(tree_id, node.tag, "live", leads_right(node), node.evaluation))
    return out


def kind_report(nodes: Iterable[RankedNode], kind: str) -> KindReport:
    """AUC overall and within trees for the nodes of ``kind`` that have an estimate."""
    scored = [n for n in nodes if n.kind == kind and n.value is not None]
    overall = auc([n.value for n in scored], _targets(scored))  # type: ignore[misc]
    wins = 0.0
    pairs = 0
    groups = _mixed_groups(scored)
    for group in groups:  # each tree's AUC, weighted by its number of pairs
        size = sum(n.right for n in group) * sum(not n.right for n in group)
        wins += auc([n.value for n in group], _targets(group)) * size  # type: ignore[misc,operator]
        pairs += size
    return KindReport(kind, len(scored), sum(n.right for n in scored),
                      None if overall is None else round(overall, 4),
                      round(wins / pairs, 4) if pairs else None, pairs, len(groups))


def decisions(trees: Mapping[str, Tree], estimates: Mapping[tuple[str, str], float] | None,
              labels: Mapping[str, Mapping[str, Any]]) -> dict[str, int]:
    """Over the trees with an answer: how many the vote gets right and how many the highest estimate does (of the
    trees whose answers have estimates).

    ``estimates`` (tree id, tag) → value replaces the stored evaluations (scored afterwards); answers without an
    estimate are left out of the value decision."""
    vote_right = value_right = answered = any_right = valued_trees = 0
    for tree_id, tree in trees.items():
        answers = tree.answers()
        if not answers:
            continue
        answered += 1
        label = labels.get(tree_id)
        any_right += any(dabench_correct(n.final_answer, label) for n in answers)
        chosen = decide(answers).vote
        vote_right += bool(chosen and dabench_correct(chosen.answer, label))
        valued = [(estimates.get((tree_id, n.tag)) if estimates is not None else n.evaluation, n) for n in answers]
        valued = [(v, n) for v, n in valued if v is not None]
        if valued:
            valued_trees += 1
            best = max(valued, key=lambda pair: pair[0])[1]  # max keeps the earliest among equals
            value_right += dabench_correct(best.final_answer, label)
    return {"trees_answered": answered, "any_right": any_right, "vote_right": vote_right,
            "trees_with_estimates": valued_trees, "value_right": value_right}


def load_run_trees(run: Path) -> dict[str, Tree]:
    """The trees of a ``jupiter bench dabench`` run folder, by question id."""
    folder = run / "trees"
    if not folder.is_dir():
        raise FileNotFoundError(f"{run}: no trees/ folder (is it a tree-search `jupiter bench dabench` run?)")
    return {path.stem: load_tree(path) for path in sorted(folder.glob("*.json"))}


def write_states(trees: Mapping[str, Tree], nodes: Sequence[RankedNode], kind: str, mixed_only: bool,
                 path: Path) -> int:
    """The nodes of ``kind`` as ``jupiter value score`` input: one {"messages", "tree", "tag", "right"} a line."""
    chosen = [n for n in nodes if n.kind == kind]
    if mixed_only:
        chosen = [n for group in _mixed_groups(chosen) for n in group]
    with path.open("w", encoding="utf-8") as fh:
        for n in chosen:
            tree = trees[n.tree]
            fh.write(json.dumps({"messages": tree.messages(tree[n.tag]), "tree": n.tree, "tag": n.tag,
                                 "kind": n.kind, "right": n.right}) + "\n")
    return len(chosen)


def read_scores(path: Path) -> dict[tuple[str, str], float]:
    """(tree, tag) → value from ``jupiter value score`` output (rows without a finite value are skipped)."""
    scores = {}
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            if "tree" not in row or "tag" not in row or "value" not in row:
                raise ValueError(f"{path}, line {number}: expected 'tree', 'tag' and 'value' (written by "
                                 f"--write-states, then `jupiter value score`)")
            if row["value"] is not None and math.isfinite(row["value"]):
                scores[(str(row["tree"]), str(row["tag"]))] = float(row["value"])
    return scores


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a `jupiter bench dabench --mode infer|collect` run folder")
    parser.add_argument("--scores", type=Path, default=None,
                        help="estimates from `jupiter value score` (instead of those the trees stored)")
    parser.add_argument("--write-states", type=Path, default=None, metavar="STATES",
                        help="write the nodes as `jupiter value score` input and stop")
    parser.add_argument("--kind", choices=KINDS, default="answer", help="which nodes --write-states writes")
    parser.add_argument("--mixed-only", action="store_true",
                        help="--write-states: only trees holding both a right and a wrong node of that kind")
    parser.add_argument("--data", default=None, help="DABench folder (default: the shared benchmarks' copy)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args(argv)
    if args.write_states and not args.write_states.parent.is_dir():
        parser.error(f"--write-states {args.write_states}: folder {args.write_states.parent} does not exist")
    if args.scores and not args.scores.is_file():
        parser.error(f"--scores {args.scores}: no such file")
    data = load_dabench(Path(args.data) if args.data else default_data_dir("dabench"))
    labels = {str(label["id"]): label for label in data.labels}
    try:
        trees = load_run_trees(args.run)
        scores = read_scores(args.scores) if args.scores else None
    except (OSError, ValueError) as exc:
        print(f"value_ranking: {exc}", file=sys.stderr)
        return 2
    nodes = [n for tree_id, tree in trees.items() for n in ranked_nodes(tree_id, tree, labels.get(tree_id))]
    if args.write_states:
        count = write_states(trees, nodes, args.kind, args.mixed_only, args.write_states)
        print(f"{count} {args.kind} states -> {args.write_states}", file=sys.stderr)
        return 0
    if scores is not None:
        nodes = [RankedNode(n.tree, n.tag, n.kind, n.right, scores.get((n.tree, n.tag))) for n in nodes]
    reports = [kind_report(nodes, kind) for kind in KINDS]
    picks = decisions(trees, scores, labels)
    if args.json:
        print(json.dumps({"run": str(args.run), "kinds": [asdict(r) for r in reports], "decisions": picks}))
        return 0
    print("| nodes | with an estimate | right | AUC | AUC within a tree | pairs | trees with both |")
    print("|---|---|---|---|---|---|---|")
    for r in reports:
        print(f"| {r.kind} | {r.nodes} | {r.right} | {r.auc} | {r.within_tree_auc} | {r.pairs} | {r.mixed_trees} |")
    print(f"\n{picks['trees_answered']} trees answered, a right answer in {picks['any_right']}; "
          f"the vote is right in {picks['vote_right']}; the highest estimate in {picks['value_right']} of the "
          f"{picks['trees_with_estimates']} trees whose answers have one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
