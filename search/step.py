"""One step of the search over one tree, as pure functions over the tree and small typed records.

    expansions = select_leaves(tree, config, rng)        # select: which leaves, how many replies each
    children = expand(tree, leaf, replies, config)        # expand: one child per kept reply, its reply's outcome
    settle_cell(child, outcome, config)                   #   ... and its cell's (the executor ran it)
    targets = evaluate(tree, children, config, ...)       # evaluate: fixed values, or the value model's
    back_up(targets, estimates, config)                   # back up: visits and values to the root

No processes, threads, files or clocks here: the executor (``search.executor``) turns a step's expansions into
batched policy calls, runs the children's cells on sandbox states (``needs_state``) and asks the value model,
and the driver (``search.driver``) repeats the step over many trees. Randomness is the ``rng`` passed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial

from jupiter.prompts import Message
from search.config import BackupRule, Mode, SearchConfig
from search.evaluate import fixed_value, needs_value_model
from search.expand import apply_execution, check_limits, classify_reply, draft_children, settle
from search.protocols import CompletionLike, ExecutionLike
from search.puct import backup, select
from search.tree import Node, NodeStatus, TerminalReason, Tree

__all__ = ["Expansion", "CellOutcome", "Targets", "iterations_done", "select_leaves", "expand", "needs_state",
           "settle_cell", "evaluate", "back_up"]


@dataclass(frozen=True)
class Expansion:
    """A leaf to expand this step, with ``samples`` replies to sample for it (K, or VOTE's runs at the root)."""

    node: Node
    samples: int


@dataclass(frozen=True)
class CellOutcome:
    """What making a child's state gave: the cell's ``execution`` (None for a child that only branches), or the
    infrastructure ``failure`` ("branch-failed", "sandbox-failed") with its ``error`` text; ``seconds`` of the
    cell's run."""

    execution: ExecutionLike | None = None
    failure: str | None = None
    error: str = ""
    seconds: float = 0.0


@dataclass(frozen=True)
class Targets:
    """How a step's new nodes of one tree are backed up: ``fixed`` with a value of their own (a reward, −1),
    ``ask`` with the value model's estimate, ``unscored`` with none (``SearchConfig.backup_rule``)."""

    fixed: list[tuple[Node, float]] = field(default_factory=list)
    ask: list[Node] = field(default_factory=list)
    unscored: list[Node] = field(default_factory=list)


def iterations_done(tree: Tree, mode: Mode) -> int:
    """The iterations ``tree`` has had: one per expanded leaf (tree modes), or one per step of its paths, which
    advance together (REACT, VOTE: the deepest expanded node's depth + 1)."""
    if mode.is_tree:
        return sum(1 for n in tree.nodes if n.expanded)
    return max((n.depth for n in tree.nodes if n.expanded), default=-1) + 1


def select_leaves(tree: Tree, config: SearchConfig, rng: random.Random) -> list[Expansion]:
    """Select: the leaves to expand next; none when the budget is spent or nothing is left to expand.

    Tree modes: up to ``leaves_per_step`` leaves by PUCT (each one claimed, so the next is the best elsewhere),
    K replies each. REACT/VOTE: the root first (VOTE: its ``vote_runs`` independent runs), then every live path
    end, one reply each.
    """
    done = iterations_done(tree, config.mode)
    if done >= config.iterations:
        return []
    if config.mode.is_tree:
        leaves: list[Node] = []
        while len(leaves) < min(config.leaves_per_step, config.iterations - done):
            node = select(tree.root, config.c_puct, rng, claimed=leaves)
            if node is None:
                break
            leaves.append(node)
        return [Expansion(node, config.expansions) for node in leaves]
    if not tree.root.expanded:
        return [Expansion(tree.root, config.vote_runs if config.mode is Mode.VOTE else 1)]
    return [Expansion(node, 1) for node in tree.nodes if node.expandable]


def expand(tree: Tree, node: Node, replies: Sequence[CompletionLike], config: SearchConfig,
           model_s: float = 0.0) -> list[Node]:
    """Expand: one child of ``node`` per kept reply (exact duplicates folded in tree modes), with its prior and,
    for a reply that runs no code, its outcome. A code child is settled by ``settle_cell`` once its cell ran."""
    drafts, _ = draft_children(replies, config.drop_duplicates and config.mode.is_tree, config.prior_rule)
    node.expanded = True
    # the reference code keeps malformed replies expandable in inference only
    malformed_terminal = config.malformed_terminal or config.mode is not Mode.INFER
    children = []
    for draft in drafts:
        parsed = draft.parsed
        child = tree.add_child(node, thought=parsed.thought, code=parsed.code, reply=draft.text,
                               finish_reason=draft.finish_reason, prior=draft.prior, final_answer=parsed.answer,
                               multiplicity=draft.multiplicity, timings={"model_s": round(model_s, 6)})
        outcome = classify_reply(draft, malformed_terminal)
        if outcome is not None:
            settle(child, node, outcome[0], config, outcome[1])
        children.append(child)
    return children


def needs_state(child: Node) -> bool:
    """Whether the executor makes ``child`` a state: a code child runs its cell in a branch of its parent's, and
    a malformed reply that stays expandable branches it (its children resample from the parent's state)."""
    return not child.is_terminal and (child.code is not None or child.is_malformed)


def settle_cell(child: Node, outcome: CellOutcome, config: SearchConfig) -> None:
    """A child's cell outcome on the child: its execution's, or an infrastructure failure that ends the branch."""
    child.timings["cell_s"] = round(outcome.seconds, 6)
    if outcome.failure is not None:
        child.exec_status, child.observation = outcome.failure, outcome.error
        settle(child, child.parent, NodeStatus.INFRASTRUCTURE, config, TerminalReason.INFRASTRUCTURE)
    elif outcome.execution is not None and child.parent is not None:
        apply_execution(child, child.parent, outcome.execution, config)


def evaluate(tree: Tree, children: Sequence[Node], config: SearchConfig, value_given: bool,
             count_tokens: Callable[[list[Message]], int] | None = None) -> Targets:
    """Evaluate: end the branches past the depth or context limit (``count_tokens``: the policy's tokenizer,
    else an estimate), then sort the new nodes by where their value comes from (``search.evaluate``). An
    infrastructure failure gets none: it says nothing about the model."""
    targets = Targets()
    for child in children:
        check_limits(child, partial(tree.messages, child), config, count_tokens)
        fixed = fixed_value(child, tree.task, config) if tree.task is not None else None
        if fixed is not None:
            targets.fixed.append((child, fixed))
        elif not child.is_infrastructure_failure:
            (targets.ask if value_given and needs_value_model(child, config) else targets.unscored).append(child)
    return targets


def back_up(targets: Targets, estimates: Sequence[float | None], config: SearchConfig) -> None:
    """Back up: each node with a value adds one visit with it to its path; then those without one, as
    ``config.backup_rule`` says. ``estimates``: the value model's for ``targets.ask``, in order (None: no usable
    estimate; that node counts as unscored).

    PER_CHILD: each unscored node is backed up with 0 from itself. EXPANSION (the reference code): none of them
    is; the node that was expanded gets one back-up of 0 for all of them, so K new live children add one zero
    visit to the path, not K (which would dilute the Q-values that become the value model's training targets).
    """
    unscored = list(targets.unscored)
    scored = list(targets.fixed)
    for node, estimate in zip(targets.ask, estimates):
        if estimate is None:
            unscored.append(node)
        else:
            scored.append((node, estimate))
    for node, value in scored:
        node.evaluation = value
        backup(node, value)
    if config.backup_rule is BackupRule.PER_CHILD:
        for node in unscored:
            node.evaluation = 0.0
            backup(node, 0.0)
        return
    expanded = {id(n.parent): n.parent for n in unscored if n.parent is not None}
    for parent in expanded.values():
        backup(parent, 0.0)
