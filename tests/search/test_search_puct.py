"""PUCT selection and back-up: properties over random trees (hypothesis) and small exact cases."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from search.puct import backup, priors_from_logprobs, puct_score, select
from search.tree import Node, TerminalReason, Tree

OPS = st.lists(
    st.tuples(st.integers(0, 50), st.booleans(), st.floats(-1, 1), st.floats(0.01, 1)),
    min_size=0, max_size=40,
)


def build(ops) -> tuple[Tree, dict[str, float]]:
    """A random tree: each op adds a child to some live node, maybe terminal, and backs up its value."""
    tree = Tree(task=None)
    own: dict[str, float] = {}
    for pick, terminal, value, prior in ops:
        live = [n for n in tree.nodes if not n.is_terminal]
        if not live:
            break
        parent = live[pick % len(live)]
        parent.expanded = True
        child = tree.add_child(parent, prior=prior)
        if terminal:
            child.terminal = TerminalReason.ANSWER
        backup(child, value)
        own[child.tag] = value
    return tree, own


@settings(max_examples=200, deadline=None)
@given(OPS)
def test_backup_keeps_visits_and_values_consistent(ops):
    tree, own = build(ops)
    assert tree.root.visit_count == len(own)
    for node in tree.nodes:
        own_visit = 1 if node.tag in own else 0
        assert node.visit_count == own_visit + sum(c.visit_count for c in node.children)
        expected = own.get(node.tag, 0.0) + sum(c.value_sum for c in node.children)
        assert math.isclose(node.value_sum, expected, abs_tol=1e-9)
        if node.visit_count:
            assert -1 - 1e-9 <= node.value <= 1 + 1e-9


def _expandable_exists(tree: Tree) -> bool:
    return any(not n.is_terminal and not n.expanded for n in tree.nodes)


@settings(max_examples=200, deadline=None)
@given(OPS, st.floats(0, 3), st.integers(0, 10))
def test_select_returns_an_expandable_node_reached_through_live_nodes(ops, c_puct, seed):
    tree, _ = build(ops)
    node = select(tree.root, c_puct, random.Random(seed))
    if node is None:
        assert not _expandable_exists(tree)
        assert tree.root.exhausted
        return
    assert node.expandable
    for ancestor in node.path()[:-1]:
        assert ancestor.expanded and not ancestor.is_terminal and not ancestor.exhausted


@settings(max_examples=200, deadline=None)
@given(OPS, st.integers(0, 10))
def test_c_puct_zero_is_greedy_on_q(ops, seed):
    tree, _ = build(ops)
    node = select(tree.root, 0.0, random.Random(seed))
    if node is None:
        return
    path = node.path()
    for parent, chosen in zip(path, path[1:]):
        live = [c for c in parent.children if not c.is_terminal and not c.exhausted]
        assert chosen.value >= max(c.value for c in live) - 1e-12


@settings(max_examples=100, deadline=None)
@given(OPS, st.floats(0, 3), st.integers(0, 1000))
def test_select_is_deterministic_for_a_seed(ops, c_puct, seed):
    first, _ = build(ops)
    second, _ = build(ops)
    a = select(first.root, c_puct, random.Random(seed))
    b = select(second.root, c_puct, random.Random(seed))
    assert (a.tag if a else None) == (b.tag if b else None)


@settings(max_examples=200, deadline=None)
@given(OPS, st.floats(0, 3), st.integers(0, 10), st.integers(1, 6))
def test_claimed_leaves_are_skipped_until_none_is_left(ops, c_puct, seed, wanted):
    tree, _ = build(ops)
    rng = random.Random(seed)
    claimed: list[Node] = []
    while len(claimed) < wanted:
        node = select(tree.root, c_puct, rng, claimed=claimed)
        if node is None:
            break
        assert node.expandable and node not in claimed
        claimed.append(node)
    expandable = [n for n in tree.nodes if n.expandable]
    assert len(claimed) == min(wanted, len(expandable))
    if claimed:  # claims are for one step only: nothing was marked exhausted because of them
        assert not tree.root.exhausted
        assert select(tree.root, c_puct, random.Random(seed)) is not None


def test_the_second_leaf_of_a_step_is_the_best_one_not_claimed():
    tree = Tree(task=None)
    tree.root.expanded = True
    best, second, worst = (tree.add_child(tree.root, prior=0.5) for _ in range(3))
    for node, value in ((best, 0.9), (second, 0.5), (worst, -0.5)):
        backup(node, value)
    assert select(tree.root, 0.0, random.Random(0)) is best
    assert select(tree.root, 0.0, random.Random(0), claimed=[best]) is second
    assert select(tree.root, 0.0, random.Random(0), claimed=[best, second]) is worst
    assert select(tree.root, 0.0, random.Random(0), claimed=[best, second, worst]) is None
    assert not tree.root.exhausted


def test_puct_formula():
    parent = Node(tag="0", depth=0, visit_count=9)
    child = Node(tag="0.1", depth=1, prior=0.5, visit_count=2, value_sum=1.0)
    assert puct_score(parent, child, 2.0) == pytest.approx(0.5 + 2.0 * 0.5 * 3 / 3)
    unvisited = Node(tag="0.2", depth=1, prior=0.5)
    assert puct_score(parent, unvisited, 1.0) == pytest.approx(0.5 * 3)


def test_exploration_prefers_the_less_visited_child_at_equal_q():
    tree = Tree(task=None)
    tree.root.expanded = True
    busy = tree.add_child(tree.root, prior=0.5)
    quiet = tree.add_child(tree.root, prior=0.5)
    for _ in range(5):
        backup(busy, 0.0)
    backup(quiet, 0.0)
    assert select(tree.root, 1.0, random.Random(0)) is quiet
    assert select(tree.root, 0.0, random.Random(0)) in (busy, quiet)


def test_ties_are_broken_by_the_rng_and_both_sides_happen():
    tree = Tree(task=None)
    tree.root.expanded = True
    children = [tree.add_child(tree.root) for _ in range(2)]
    for child in children:
        backup(child, 0.5)
    picks = {select(tree.root, 1.0, random.Random(seed)).tag for seed in range(40)}
    assert picks == {"0.1", "0.2"}


def test_exhausted_subtrees_are_skipped_and_marked():
    tree = Tree(task=None)
    tree.root.expanded = True
    dead = tree.add_child(tree.root)
    live = tree.add_child(tree.root)
    dead.expanded = True
    leaf = tree.add_child(dead)
    leaf.terminal = TerminalReason.NO_CODE
    backup(leaf, -1.0)
    backup(live, -0.9)
    dead.value_sum = 5.0  # make the dead branch look best
    assert select(tree.root, 0.0, random.Random(0)) is live
    assert dead.exhausted and not live.exhausted
    live.terminal = TerminalReason.ANSWER
    assert select(tree.root, 0.0, random.Random(0)) is None
    assert tree.root.exhausted


def test_priors_exp_softmax_and_uniform_fallback():
    # reference code: exp(mean log-prob), not normalised (more exploration than a softmax)
    assert priors_from_logprobs([-1.0, -1.0]) == pytest.approx([math.exp(-1.0)] * 2)
    priors = priors_from_logprobs([-0.1, -2.0, -5.0])
    assert priors == pytest.approx([math.exp(-0.1), math.exp(-2.0), math.exp(-5.0)])
    assert priors_from_logprobs([-1.0, -1.0], "softmax") == [0.5, 0.5]
    priors = priors_from_logprobs([-0.1, -2.0, -5.0], "softmax")
    assert sum(priors) == pytest.approx(1.0) and priors[0] > priors[1] > priors[2]
    assert priors_from_logprobs([-0.1, -2.0], "uniform") == [0.5, 0.5]
    assert priors_from_logprobs([-0.1, None]) == [0.5, 0.5]
    assert priors_from_logprobs([-0.1, -0.1], multiplicities=[2, 1]) == pytest.approx(
        [2 * math.exp(-0.1), math.exp(-0.1)])
    assert priors_from_logprobs([]) == []
