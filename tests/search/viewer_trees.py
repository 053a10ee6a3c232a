"""Trees for the viewer's tests: a search-shaped tree of a chosen size, built with the project's tree types.

``wide_tree(150)`` grows a tree the way the search does (pick a live leaf, add K=3 sampled children) with a
seeded RNG: steps that ran, erroring cells, model failures, an infrastructure failure, and answers in a few
groups — the label's answer in two spellings that the vote folds together (``@mean_fare[34.65]`` and
``@mean_fare[ 34.650 ]``), near misses, and one long answer that must be cut into a chip. Visits and values
are backed up as the search would (answers +1 if right, −1 if wrong, failures −1) so sizes and the value
colouring have something to show. ``decided(tree)`` is the tree's ``SearchResult`` from the real decision code.
"""

from __future__ import annotations

import random

from jupiter.answers import reward
from jupiter.task import Task
from search.config import Mode, SearchConfig
from search.result import SearchResult, SearchStats, result_from_tree
from search.tree import Node, NodeStatus, TerminalReason, Tree

LABEL = "@mean_fare[34.65]"
ANSWERS = (
    (LABEL, 10), ("@mean_fare[ 34.650 ]", 3), ("@mean_fare[34.7]", 4), ("@mean_fare[35.63]", 3),
    ("@mean_fare[32.2]", 2), ("@mean_fare[34.65] @median_fare[14.45] @passengers_with_fare_above_mean[211]", 1),
    ("The mean fare is 34.65", 1),
)
QUESTION = "Calculate the mean fare paid by the passengers of the Titanic, rounded to two decimals."


def _task(question: str) -> Task:
    return Task(id="titanic-wide", question=question, constraints="Use pandas.", format="@mean_fare[value]",
                files=(), label=LABEL)


def _backup(node: Node, value: float) -> None:
    current: Node | None = node
    while current is not None:
        current.visit_count += 1
        current.value_sum += value
        current = current.parent


def wide_tree(size: int = 150, seed: int = 0, thought: str = "Look at the fares first.",
              question: str = QUESTION) -> Tree:
    """A search-shaped tree of exactly ``size`` nodes (size >= 4)."""
    rng = random.Random(seed)
    tree = Tree(_task(question))
    live = [tree.root]
    answers = [a for a, weight in ANSWERS for _ in range(weight)]
    infrastructure_done = False
    while len(tree) < size:
        parent = rng.choice(live) if len(live) > 1 else live[0]
        live.remove(parent)
        parent.expanded = True
        for _ in range(3):
            if len(tree) >= size:
                break
            roll = rng.random()
            depth = parent.depth + 1
            if depth >= 2 and (roll < 0.32 or depth >= 7):
                answer = rng.choice(answers)
                node = tree.add_child(parent, thought="I now know the final answer.", status=NodeStatus.ANSWER,
                                      terminal=TerminalReason.ANSWER, final_answer=answer,
                                      reply=f"Thought: done.\nFinal Answer: {answer}")
                _backup(node, reward(answer, LABEL) * 2 - 1)
                node.evaluation = reward(answer, LABEL) * 2 - 1
            elif roll < 0.40:
                node = tree.add_child(parent, thought="", status=NodeStatus.NO_CODE,
                                      terminal=TerminalReason.NO_CODE, reply="I am not sure what to do.")
                _backup(node, -1.0)
            elif roll < 0.43 and not infrastructure_done:
                infrastructure_done = True
                node = tree.add_child(parent, thought="Load everything.", code="big = load_all()",
                                      observation="the cell timed out after 180 s", status=NodeStatus.INFRASTRUCTURE,
                                      terminal=TerminalReason.INFRASTRUCTURE)
            elif roll < 0.55:
                node = tree.add_child(parent, thought=thought, code="df['Fare'].meen()",
                                      observation="AttributeError: 'Series' object has no attribute 'meen'",
                                      status=NodeStatus.CODE_ERROR, consecutive_errors=parent.consecutive_errors + 1)
                live.append(node)
            else:
                node = tree.add_child(parent, thought=thought,
                                      code="import pandas as pd\ndf = pd.read_csv('titanic.csv')\n"
                                           "print(df['Fare'].describe())",
                                      observation="count    891.000000\nmean      34.654321\n",
                                      status=NodeStatus.CODE_OK)
                live.append(node)
        if not live:  # every branch ended: reopen the shallowest step so the tree can reach its size
            live.append(min((n for n in tree.nodes if n.status is NodeStatus.CODE_OK), key=lambda n: n.depth))
    return tree


def decided(tree: Tree) -> SearchResult:
    """The tree's result, decided by the engine's own code (vote; no value model)."""
    config = SearchConfig(mode=Mode.INFER, iterations=40)
    stats = SearchStats(iterations=40, nodes=len(tree), answers=len(tree.answers()))
    return result_from_tree(tree.task.id if tree.task else "tree", tree, config, stats, value_given=False)
