"""How well a value model orders the nodes of saved DABench trees *within a question* (``jupiter value rank``).

The search gains from a value model only where it orders the nodes of one tree: with c_puct 0 the tree follows
the estimates, and the value decision takes the highest one. An AUC over all the nodes of a run mixes that with
how hard each question is (a model that learned only "easy questions end well" scores above chance there and
helps no tree), so this reports both, for two kinds of node:

- ``answer``: the answer nodes, right or wrong against the DABench label;
- ``live``: the nodes whose cell ran and that are neither an answer nor a failure, "right" when a right answer
  lies below them in the tree.

Score trees the model did not grow (a run made without it): in a tree grown by the model itself the search
expands only where its estimates are high, so the right answers it finds lie under high estimates.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field

from benchmarks.dabench import dabench_correct
from jupiter.config_model import ConfigModel, Flag
from search.decide import decide
from search.tree import Node, NodeStatus, Tree
from search.tree_io import load_tree

__all__ = ["KINDS", "KindReport", "RankedNode", "auc", "kind_report", "rank_trees", "read_ranked_nodes", "run_trees"]

KINDS = ("answer", "live")
Scorer = Callable[[list[list[dict[str, Any]]]], list[float]]


@dataclass(frozen=True)
class RankedNode:
    """One node to rank: its tree, its kind, whether it is right (or leads to a right answer), its estimate."""

    tree: str
    tag: str
    kind: str
    right: bool
    value: float


@dataclass(frozen=True)
class KindReport:
    """How well the estimates order one kind of node: over all nodes, and over (right, wrong) pairs of one tree
    (each tree weighted by its number of pairs)."""

    kind: str
    nodes: int
    right: int
    auc: float | None
    within_tree_auc: float | None
    pairs: int
    mixed_trees: int  # trees holding both a right and a wrong node of this kind
    within_tree_interval: tuple[float, float] | None = None  # 95 % bootstrap over those trees' questions


def auc(values: Sequence[float], right: Sequence[bool]) -> float | None:
    """The probability that a right node's value beats a wrong one's (ties count half: scikit-learn's ROC AUC);
    None without both kinds."""
    if len(set(right)) < 2:
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score([bool(r) for r in right], list(values)))


def _is_live(node: Node) -> bool:
    return node.status in (NodeStatus.CODE_OK, NodeStatus.CODE_ERROR) and not node.is_terminal


def _nodes_to_rank(tree: Tree, label: dict[str, Any] | None) -> list[tuple[Node, str, bool]]:
    right_below: dict[int, bool] = {}

    def leads_right(node: Node) -> bool:
        if id(node) not in right_below:
            right_below[id(node)] = (dabench_correct(node.final_answer, label) if node.is_answer
                                     else any(leads_right(child) for child in node.children))
        return right_below[id(node)]

    return [(node, "answer" if node.is_answer else "live", leads_right(node))
            for node in tree if node.is_answer or _is_live(node)]


def rank_trees(trees: dict[str, Tree], labels: dict[str, dict[str, Any]], score: Scorer,
               ) -> tuple[list[RankedNode], dict[str, int]]:
    """Score the answer and live nodes of each tree (one batched call a tree) and decide each tree both ways.

    Returns the ranked nodes and the decisions: trees with an answer, with a right one among them, right by the
    vote, right by the highest estimate."""
    ranked: list[RankedNode] = []
    picks = {"trees_answered": 0, "any_right": 0, "vote_right": 0, "value_right": 0}
    for tree_id, tree in trees.items():
        label = labels.get(tree_id)
        chosen = _nodes_to_rank(tree, label)
        values = score([tree.messages(node) for node, _, _ in chosen]) if chosen else []
        ranked += [RankedNode(tree_id, node.tag, kind, right, float(value))
                   for (node, kind, right), value in zip(chosen, values)]
        answers = [(value, node) for (node, kind, _), value in zip(chosen, values) if kind == "answer"]
        if answers:
            picks["trees_answered"] += 1
            picks["any_right"] += any(dabench_correct(node.final_answer, label) for _, node in answers)
            vote = decide([node for _, node in answers]).vote
            picks["vote_right"] += bool(vote and dabench_correct(vote.answer, label))
            best = max(answers, key=lambda pair: pair[0])[1]  # the earliest among equals
            picks["value_right"] += dabench_correct(best.final_answer, label)
    return ranked, picks


def kind_report(nodes: Iterable[RankedNode], kind: str, resamples: int = 2000, seed: int = 0) -> KindReport:
    """AUC over all nodes of ``kind`` and within trees, with a 95 % interval for the latter.

    The interval resamples the questions that hold a mixed tree, with replacement, ``resamples`` times: a run has
    only a dozen or so of them, so it says whether two models' within-question AUCs, or one and a target, are told
    apart. Trees of one question from several runs (``run/id``, as ``jupiter value rank`` names them) are drawn
    together, since a question's trees share its data and its label."""
    chosen = [n for n in nodes if n.kind == kind]
    by_tree: dict[str, list[RankedNode]] = {}
    for n in chosen:
        by_tree.setdefault(n.tree, []).append(n)
    per_tree: dict[str, tuple[float, int]] = {}  # (within-tree AUC, pairs) of each mixed tree
    for tree, group in by_tree.items():
        within = auc([n.value for n in group], [n.right for n in group])
        if within is not None:
            per_tree[tree] = (within, sum(n.right for n in group) * sum(not n.right for n in group))
    pairs = sum(size for _, size in per_tree.values())
    by_question: dict[str, list[tuple[float, int]]] = {}
    for tree, value in per_tree.items():
        by_question.setdefault(tree.rsplit("/", 1)[-1], []).append(value)
    per_question = [(_pair_weighted(group), sum(size for _, size in group)) for group in by_question.values()]
    overall = auc([n.value for n in chosen], [n.right for n in chosen])
    return KindReport(kind, len(chosen), sum(n.right for n in chosen), None if overall is None else round(overall, 4),
                      round(_pair_weighted(list(per_tree.values())), 4) if pairs else None, pairs, len(per_tree),
                      _bootstrap_interval(per_question, resamples, seed) if pairs else None)


def _pair_weighted(aucs: Sequence[tuple[float, int]]) -> float:
    return sum(value * size for value, size in aucs) / sum(size for _, size in aucs)


def _bootstrap_interval(per_question: Sequence[tuple[float, int]], resamples: int, seed: int) -> tuple[float, float]:
    """The 2.5th and 97.5th percentiles of the pair-weighted AUC over questions drawn with replacement (SciPy's
    percentile bootstrap, each question's AUC drawn with its pair count); one question has nothing to resample."""
    if len(per_question) == 1:
        return round(per_question[0][0], 4), round(per_question[0][0], 4)
    import numpy as np
    from scipy.stats import bootstrap

    def pair_weighted(values: np.ndarray, sizes: np.ndarray, axis: int = -1) -> np.ndarray:
        return (values * sizes).sum(axis=axis) / sizes.sum(axis=axis)

    data = (np.array([value for value, _ in per_question]), np.array([size for _, size in per_question], dtype=float))
    result = bootstrap(data, pair_weighted, paired=True, vectorized=True, n_resamples=resamples,
                       method="percentile", confidence_level=0.95, rng=np.random.default_rng(seed))
    low, high = result.confidence_interval
    return round(float(low), 4), round(float(high), 4)


def run_trees(run: Path) -> dict[str, Tree]:
    """The trees of a ``jupiter bench dabench`` run folder, by question id."""
    folder = run / "trees"
    if not folder.is_dir():
        raise FileNotFoundError(f"{run}: no trees/ folder (is it a tree-search `jupiter bench dabench` run?)")
    return {path.stem: load_tree(path) for path in sorted(folder.glob("*.json"))}


class _NodeRow(ConfigModel):
    """One row of a ``--nodes-out`` file, validated (strict: ``"1"`` is not a value, ``1`` is not ``right``)."""

    tree: Annotated[str, Field(strict=True)]
    tag: Annotated[str, Field(strict=True)]
    kind: Literal["answer", "live"]
    right: Flag
    value: Annotated[float, Field(strict=True, allow_inf_nan=False)]


def read_ranked_nodes(path: Path) -> list[RankedNode]:
    """The nodes a ``jupiter value rank --nodes-out`` file holds (JSONL, gzipped when it ends in ``.gz``), to
    report them again or beside another run's without scoring again.

    Raises ValueError naming the file, the line and the bad field."""
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as lines:
            return _ranked_nodes(path, lines)
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None


def _ranked_nodes(path: Path, lines: Iterable[str]) -> list[RankedNode]:
    """Validate each row (pydantic, strict); a bad one raises ValueError naming the line and field."""
    nodes = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not isinstance(row, dict):
                raise ValueError("not a JSON object")
            node = _NodeRow(**row)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: not a 'jupiter value rank --nodes-out' row: {exc}") from None
        nodes.append(RankedNode(node.tree, node.tag, node.kind, node.right, node.value))
    return nodes
