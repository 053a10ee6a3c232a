"""The search step on its own: select, expand, settle, evaluate and back up run on a tree with no policy, sandbox
or thread (the replies and cell outcomes are handed in), and the stats are counted from the tree they leave."""

from __future__ import annotations

import random

from search_fakes import FakeCompletion, FakeExecution, FakeStatus, answer, code

from jupiter.task import Task
from search import Mode, SearchConfig
from search.result import Costs, tree_stats
from search.step import CellOutcome, back_up, evaluate, expand, iterations_done, needs_state, select_leaves, settle_cell
from search.tree import NodeStatus, TerminalReason, Tree

TASK = Task(id="sum", question="What is 1 + 2?", format="@x[value]", label="@x[3]")
CONFIG = SearchConfig(mode=Mode.COLLECT, iterations=4, expansions=3, max_consecutive_errors=1, drop_duplicates=True)


def test_one_step_by_hand_with_known_rewards():
    tree = Tree(TASK)
    rng = random.Random(0)
    [expansion] = select_leaves(tree, CONFIG, rng)
    assert expansion.node is tree.root and expansion.samples == 3
    replies = [FakeCompletion(code("add", "x = 3")), FakeCompletion(answer("@x[3]")),
               FakeCompletion("Thought: chat"), FakeCompletion(answer("@x[3]"))]
    children = expand(tree, tree.root, replies, CONFIG)
    assert [c.multiplicity for c in children] == [1, 2, 1]  # the repeated answer folds into one child
    assert [c.status for c in children] == [NodeStatus.ROOT, NodeStatus.ANSWER, NodeStatus.NO_CODE]
    assert [needs_state(c) for c in children] == [True, False, False]  # only the code child runs
    settle_cell(children[0], CellOutcome(execution=FakeExecution(FakeStatus.OK, "3"), seconds=0.25), CONFIG)
    assert children[0].status is NodeStatus.CODE_OK and children[0].observation == "3"
    targets = evaluate(tree, children, CONFIG, value_given=False)
    assert [(n.tag, v) for n, v in targets.fixed] == [("0.2", 1.0), ("0.3", -1.0)]
    assert targets.ask == [] and targets.unscored == [children[0]]
    back_up(targets, [], CONFIG)
    # the reference rule: the answer and the failure once each, the live child one zero from the expanded root
    assert tree.root.visit_count == 3 and tree.root.value_sum == 0.0 and children[0].visit_count == 0
    stats = tree_stats(tree, CONFIG.mode, Costs(model_calls=1), wall_seconds=1.0)
    assert (stats.iterations, stats.nodes, stats.answers, stats.model_failures, stats.duplicates_dropped,
            stats.kernel_seconds, stats.model_calls) == (1, 4, 1, 1, 1, 0.25, 1)
    assert [e.node for e in select_leaves(tree, CONFIG, rng)] == [children[0]]  # the one live leaf is next


def test_value_estimates_and_failures_of_the_executor_reach_the_tree():
    tree = Tree(TASK)
    infer = SearchConfig(mode=Mode.INFER, iterations=4, expansions=2)
    children = expand(tree, tree.root, [FakeCompletion(code("a", "x = 1")), FakeCompletion(code("b", "y"))], infer)
    settle_cell(children[0], CellOutcome(execution=FakeExecution(FakeStatus.OK, "")), infer)
    settle_cell(children[1], CellOutcome(failure="sandbox-failed", error="OSError: gone"), infer)
    assert children[1].terminal is TerminalReason.INFRASTRUCTURE and children[1].exec_status == "sandbox-failed"
    targets = evaluate(tree, children, infer, value_given=True)
    assert targets.ask == [children[0]] and targets.fixed == [] and targets.unscored == []  # no value: infra
    back_up(targets, [0.5], infer)
    assert children[0].evaluation == 0.5 and tree.root.visit_count == 1 and children[1].visit_count == 0
    assert tree_stats(tree, infer.mode, Costs(), 0.0).infrastructure_failures == 1


def test_paths_count_one_iteration_per_step():
    tree = Tree(TASK)
    vote = SearchConfig(mode=Mode.VOTE, iterations=5, vote_runs=3, temperature=0.7, c_puct=0.0)
    [first] = select_leaves(tree, vote, random.Random(0))
    assert first.samples == 3
    children = expand(tree, tree.root, [FakeCompletion(code("a", "x = 1"))] * 3, vote)
    assert len(children) == 3  # independent runs: duplicates are kept
    for child in children:
        settle_cell(child, CellOutcome(execution=FakeExecution(FakeStatus.OK, "")), vote)
    assert [e.node for e in select_leaves(tree, vote, random.Random(0))] == children
    for child in children:
        expand(tree, child, [FakeCompletion(answer("@x[1]"))], vote)
    assert iterations_done(tree, vote.mode) == 2
