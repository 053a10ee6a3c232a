"""Selection by PUCT and back-up: pure functions over the tree.

    score(child) = Q(child) + c_puct · P(child) · sqrt(N(parent)) / (1 + N(child)),   Q = value_sum / N (0 if N = 0)

``select`` descends from the root to an expandable node, skipping terminal children and exhausted subtrees;
an expanded node with nothing selectable left below is marked exhausted on the way. Ties are broken by the
``random.Random`` the caller passes in (no global random state).
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection

from search.config import PriorRule
from search.tree import Node

__all__ = ["puct_score", "select", "backup", "priors_from_logprobs"]

#: scores within this distance of the best count as a tie
_TIE = 1e-12


def puct_score(parent: Node, child: Node, c_puct: float) -> float:
    """The PUCT score of ``child`` under ``parent``."""
    exploration = c_puct * child.prior * math.sqrt(parent.visit_count) / (1 + child.visit_count)
    return child.value + exploration


def _selectable(node: Node) -> bool:
    return not node.is_terminal and not node.exhausted


def select(root: Node, c_puct: float, rng: random.Random, claimed: Collection[Node] = ()) -> Node | None:
    """Descend from ``root`` to an expandable node; None when the whole tree is exhausted (or every expandable
    node is ``claimed``).

    ``claimed``: leaves already selected for this step (``SearchConfig.leaves_per_step``); the descent treats
    them, and any subtree with nothing left but them, as unselectable for this call only, so the next selection
    is the best leaf elsewhere (a virtual loss that rules the claimed leaf out).
    Side effect: nodes found to have no expandable descendant get ``exhausted = True``.
    """
    blocked = {id(n) for n in claimed}  # this call only: claimed leaves and subtrees with nothing else left
    while not root.exhausted and id(root) not in blocked:
        node = root
        while True:
            if node.is_terminal:  # only the root can get here
                node.exhausted = True
                break
            if not node.expanded:
                return node
            selectable = [c for c in node.children if _selectable(c)]
            candidates = [c for c in selectable if id(c) not in blocked]
            if not candidates:
                if selectable:
                    blocked.add(id(node))
                else:
                    node.exhausted = True
                break
            scores = [puct_score(node, c, c_puct) for c in candidates]
            best = max(scores)
            tied = [c for c, s in zip(candidates, scores) if s >= best - _TIE]
            node = tied[0] if len(tied) == 1 else rng.choice(tied)
    return None


def backup(node: Node, value: float) -> None:
    """Add one visit with ``value`` to ``node`` and every ancestor up to the root."""
    current: Node | None = node
    while current is not None:
        current.visit_count += 1
        current.value_sum += value
        current = current.parent


def priors_from_logprobs(mean_logprobs: list[float | None], rule: PriorRule | str = PriorRule.EXP,
                         multiplicities: list[int] | None = None) -> list[float]:
    """The PUCT priors of K kept sibling replies from their mean token log-probabilities.

    ``PriorRule.EXP`` (the reference code): ``exp(mean log-prob)``, not normalised, so a confident sibling set
    keeps a large exploration bonus; ``SOFTMAX``: normalised over the siblings; ``UNIFORM``: 1/K. Any missing
    or non-finite log-prob makes the set uniform (1/K over the replies the policy sampled). A reply sampled m
    times (``multiplicities``; duplicates are kept as one node) gets m times its prior, as m separate children
    would have in total.
    """
    count = len(mean_logprobs)
    if count == 0:
        return []
    weights_m = multiplicities if multiplicities is not None else [1] * count
    rule = PriorRule(rule)
    logprobs = [lp for lp in mean_logprobs if lp is not None and math.isfinite(lp)]
    if rule is PriorRule.UNIFORM or len(logprobs) < count:
        votes = sum(weights_m)
        return [m / votes for m in weights_m]
    if rule is PriorRule.EXP:
        return [m * math.exp(min(lp, 0.0)) for lp, m in zip(logprobs, weights_m)]
    top = max(logprobs)
    weights = [m * math.exp(lp - top) for lp, m in zip(logprobs, weights_m)]
    total = sum(weights)
    return [w / total for w in weights]
