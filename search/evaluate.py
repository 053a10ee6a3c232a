"""Evaluation: the number each new node is backed up with.

COLLECT: an answer scores +1 if it matches the label and −1 otherwise (or 2·share − 1 with partial credit);
other live nodes get the value model's estimate, or 0.
INFER / REACT / VOTE: answers and live nodes get the value model's estimate, or 0 without one.
In every mode a model failure (unparsable reply, no code, too many errors, depth or context exhausted) is −1 —
also a malformed reply that stays expandable (``SearchConfig.malformed_terminal`` False) — and an
infrastructure failure is *not* evaluated at all: it says nothing about the model.
"""

from __future__ import annotations

from jupiter.answers import reward
from jupiter.task import Task
from search.config import Mode, SearchConfig
from search.tree import MODEL_FAILURES, Node

__all__ = ["FAILURE_VALUE", "needs_value_model", "fixed_value"]

FAILURE_VALUE = -1.0


def needs_value_model(node: Node, config: SearchConfig) -> bool:
    """Whether ``node``'s evaluation comes from the value model (when one is given)."""
    if node.is_infrastructure_failure or node.terminal in MODEL_FAILURES or node.is_malformed:
        return False
    if node.is_answer:
        return config.mode is not Mode.COLLECT
    return True


def fixed_value(node: Node, task: Task, config: SearchConfig) -> float | None:
    """The evaluation that needs no value model; None when the value model (or 0) decides.

    Raises ValueError when COLLECT meets a task without a label.
    """
    if node.is_infrastructure_failure:
        return None
    if node.terminal in MODEL_FAILURES or node.is_malformed:
        return FAILURE_VALUE
    if node.is_answer and config.mode is Mode.COLLECT:
        if task.label is None:
            raise ValueError(f"task {task.id}: collect mode needs a label to score answers")
        return reward(node.final_answer, task.label, partial=config.partial_credit)
    return None
