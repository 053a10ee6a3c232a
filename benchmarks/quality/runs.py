"""Run one mode of the comparison through the real engine and measure what it did, per question and in total.

Every mode goes through ``search.solve_many`` with the real fork sandbox (one shared ``Sandbox``, real cells on
the real tables) and the simulated policy, so baselines and search share prompt, parser, limits and accounting.
Per tree it records the decided answer, whether it is right, whether the right answer was among the candidates
(``in_tree``), the plurality of the sampled answers (votes counted with duplicates) and the costs.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from jupiter.answers import canonical_answer, reward
from jupiter.task import Task
from sandbox import Sandbox, SandboxConfig
from search import SearchConfig, SearchResult, Value, solve_many, save_tree

__all__ = ["PRELOAD", "TreeOutcome", "ModeRun", "outcome_of", "run_mode", "default_sandbox"]


@dataclass(frozen=True)
class TreeOutcome:
    """One question under one mode."""

    task_id: str
    level: str
    answer: str | None
    correct: bool
    in_tree: bool  # a candidate answer scores 1 against the label
    candidates: int  # answer nodes
    votes: dict[str, int]  # canonical answer -> sampled replies (duplicates included)
    plurality: tuple[str, ...]  # the canonical answers with the most votes (several on a tie)
    right_is_plurality: bool  # the right answer alone has the most votes
    agrees_with_plurality: bool | None  # decided answer is a plurality answer (None: no candidates)
    decided_by: str
    tokens: int
    model_calls: int
    requests: int
    kernel_seconds: float
    nodes: int
    code_errors: int
    error: str | None = None
    value_correct: bool | None = None  # the value-selected answer is right (None: no value model, no answer)


@dataclass
class ModeRun:
    """All trees of one mode, and the mode's wall time."""

    mode: str
    outcomes: list[TreeOutcome] = field(default_factory=list)
    wall_s: float = 0.0
    policy_calls: int = 0
    config: dict[str, Any] = field(default_factory=dict)

    def subset(self, task_ids: Sequence[str]) -> "ModeRun":
        wanted = set(task_ids)
        return ModeRun(self.mode, [o for o in self.outcomes if o.task_id in wanted], self.wall_s, self.policy_calls,
                       self.config)

    def summary(self) -> dict[str, Any]:
        """``acc``, ``in_tree_rate``, ``tokens``, ``model_calls``, ``kernel_seconds``, ``wall_s`` and friends."""
        n = len(self.outcomes)
        decided = [o for o in self.outcomes if o.agrees_with_plurality is not None]
        return {
            "questions": n,
            "acc": _share(sum(o.correct for o in self.outcomes), n),
            "in_tree_rate": _share(sum(o.in_tree for o in self.outcomes), n),
            "right_is_plurality_rate": _share(sum(o.right_is_plurality for o in self.outcomes), n),
            "plurality_agreement": _share(sum(bool(o.agrees_with_plurality) for o in decided), len(decided)),
            "tokens": sum(o.tokens for o in self.outcomes),
            "model_calls": self.policy_calls,
            "requests": sum(o.requests for o in self.outcomes),
            "kernel_seconds": round(sum(o.kernel_seconds for o in self.outcomes), 3),
            "wall_s": round(self.wall_s, 3),
            "nodes": sum(o.nodes for o in self.outcomes),
            "no_answer": sum(o.answer is None for o in self.outcomes),
            # the value decision (--decision value) on the same trees; None without a value model
            "value_acc": (_share(sum(bool(o.value_correct) for o in self.outcomes), n)
                          if any(o.value_correct is not None for o in self.outcomes) else None),
            "errors": sum(o.error is not None for o in self.outcomes),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "summary": self.summary(), "config": self.config,
                "outcomes": [asdict(o) for o in self.outcomes]}


def _share(count: int, total: int) -> float | None:
    return round(count / total, 4) if total else None


def outcome_of(result: SearchResult) -> TreeOutcome:
    """Measure one finished tree."""
    task = result.tree.task
    label = task.label if task is not None else None
    votes: dict[str, int] = {}
    right_keys: set[str] = set()
    in_tree = False
    for node in result.tree.answers():
        key = canonical_answer(node.final_answer or "")
        votes[key] = votes.get(key, 0) + max(1, int(node.multiplicity))
        if label is not None and reward(node.final_answer, label) == 1.0:
            in_tree = True
            right_keys.add(key)
    top = max(votes.values(), default=0)
    plurality = tuple(sorted(k for k, v in votes.items() if v == top)) if votes else ()
    agrees = None
    if votes and result.answer is not None:
        agrees = canonical_answer(result.answer) in plurality
    correct = bool(label is not None and result.answer is not None and reward(result.answer, label) == 1.0)
    value_correct = (None if result.value_answer is None or label is None
                     else reward(result.value_answer, label) == 1.0)
    stats = result.stats
    return TreeOutcome(
        task_id=result.task_id, level=task.level if task is not None else "", answer=result.answer,
        correct=correct, in_tree=in_tree, candidates=len(result.tree.answers()), votes=votes, plurality=plurality,
        right_is_plurality=len(plurality) == 1 and plurality[0] in right_keys,
        agrees_with_plurality=agrees, decided_by=result.decided_by, tokens=int(stats.completion_tokens),
        model_calls=int(stats.model_calls), requests=int(stats.requests),
        kernel_seconds=float(stats.kernel_seconds), nodes=int(stats.nodes), code_errors=int(stats.code_errors),
        error=result.error, value_correct=value_correct,
    )


#: modules loaded once in the sandbox's template runtime: the ones the reference solutions import (importing
#: scikit-learn in a cell costs ~4 s on a busy 2-core machine, and every tree node that runs such a cell would pay it
#: again); with pandas preloaded the runtime also warms its traceback formatting (``sandbox/_server.py``)
PRELOAD = ("numpy", "pandas", "scipy.stats", "sklearn.linear_model", "sklearn.model_selection")


def default_sandbox(cell_timeout: float = 60.0) -> Sandbox:
    """The real fork sandbox the modes share (more live states than the default: many small trees at once)."""
    return Sandbox(SandboxConfig(timeout_s=cell_timeout, max_live_states=256, preload_modules=PRELOAD))


def run_mode(name: str, tasks: Sequence[Task], policy: Any, config: SearchConfig, *, value: Value | None = None,
             seed: int = 0, tree_dir: Path | None = None,
             sandbox_factory: Callable[[], Sandbox] = default_sandbox,
             on_result: Callable[[SearchResult], None] | None = None) -> ModeRun:
    """Search every task with ``config`` in one shared sandbox; optionally save each tree under ``tree_dir``."""
    calls_before = policy.stats().calls
    run = ModeRun(name, config=config.to_dict())
    started = time.perf_counter()
    with sandbox_factory() as sandbox:
        for result in solve_many(tasks, policy, lambda: sandbox, config, value, seed=seed, close_sandboxes=False):
            run.outcomes.append(outcome_of(result))
            if tree_dir is not None:
                tree_dir.mkdir(parents=True, exist_ok=True)
                save_tree(result.tree, tree_dir / f"{result.task_id}.json")
            if on_result is not None:
                on_result(result)
    run.wall_s = time.perf_counter() - started
    run.policy_calls = policy.stats().calls - calls_before
    order = {t.id: i for i, t in enumerate(tasks)}
    run.outcomes.sort(key=lambda o: order.get(o.task_id, len(order)))
    return run
