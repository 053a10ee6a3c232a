"""Self-training data: the paths of labelled trees that end in a right answer, as SFT rows.

Why: collection trees (``--mode collect``, rewards from the reference label) hold the policy's own verified
solutions, written in its own words and including the errors it made on the way and how it fixed them.
Fine-tuning on them (rejection-sampling fine-tuning, as in STaR) teaches the policy what worked for it, where
the synthesized NbQA solutions teach what a template wrote. Neither the paper nor its code has this stage;
its effect on the default policy is not measured yet (docs/nbqa.md, "right-paths").

A row is in the ShareGPT layout ``jupiter sft`` reads (``nbqa export`` writes the same), built with
``Tree.messages``, the chat the search itself shows the model. Steps whose cell raised stay in the context
but are listed in ``no_loss_turns``: the model sees the mistake and learns the fix, not the mistake.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupiter.config_model import ConfigModel, PositiveInt
from search.tree import Node, NodeStatus, Tree
from search.tree_io import load_tree

__all__ = ["RightPathsConfig", "RightPathsReport", "right_path_rows", "collect_right_paths"]

_ROLE = {"user": "human", "assistant": "gpt"}


class RightPathsConfig(ConfigModel):
    """Which right paths of a tree become SFT rows."""

    max_per_tree: PositiveInt = 4
    """distinct right paths kept per tree (in creation order), so no task dominates"""


@dataclass
class RightPathsReport:
    trees: int = 0
    trees_with_right_answer: int = 0
    right_answers: int = 0
    rows: int = 0
    duplicate_paths: int = 0  # right answers whose chat equals one already written
    over_cap: int = 0  # right paths beyond max_per_tree
    rows_with_fixed_error: int = 0  # rows holding a step that raised (kept out of the loss)
    steps: int = 0
    steps_out_of_loss: int = 0
    skipped_files: dict[str, str] = field(default_factory=dict)


def _is_right(node: Node) -> bool:
    return node.is_answer and node.evaluation is not None and node.evaluation > 0


def right_path_rows(tree: Tree, tree_id: str, config: RightPathsConfig = RightPathsConfig(),
                    report: RightPathsReport | None = None) -> list[dict[str, Any]]:
    """ShareGPT rows for the right answers of one tree (a node is right when it was backed up with reward > 0)."""
    report = report if report is not None else RightPathsReport()
    report.trees += 1
    right = [n for n in tree.nodes if _is_right(n)]
    report.right_answers += len(right)
    report.trees_with_right_answer += bool(right)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for node in right:
        messages = tree.messages(node)
        key = repr(messages)
        if key in seen:
            report.duplicate_paths += 1
            continue
        seen.add(key)
        if len(rows) == config.max_per_tree:
            report.over_cap += 1
            continue
        steps = [n for n in node.path()[1:] if n.turn() is not None]
        gpt_turns = [m for m in messages if m["role"] == "assistant"]
        if len(steps) != len(gpt_turns):
            raise ValueError(f"{tree_id}: node {node.tag}: {len(steps)} steps but {len(gpt_turns)} assistant turns")
        conversations = [{"from": _ROLE[m["role"]], "value": m["content"]} for m in messages[1:]]
        gpt_index = [i for i, c in enumerate(conversations) if c["from"] == "gpt"]
        no_loss = [i for i, step in zip(gpt_index, steps) if step.status is NodeStatus.CODE_ERROR]
        report.steps += len(steps)
        report.steps_out_of_loss += len(no_loss)
        report.rows_with_fixed_error += bool(no_loss)
        rows.append({"id": f"{tree_id}:{node.tag}", "system": messages[0]["content"],
                     "conversations": conversations, "no_loss_turns": no_loss})
    report.rows += len(rows)
    return rows


def collect_right_paths(tree_files: Iterable[str | Path], config: RightPathsConfig = RightPathsConfig()
                        ) -> tuple[list[dict[str, Any]], RightPathsReport]:
    """Rows from every tree file; an unreadable file is skipped and named in the report, never silently."""
    report = RightPathsReport()
    rows: list[dict[str, Any]] = []
    for path in sorted(Path(p) for p in tree_files):
        try:
            tree = load_tree(path)
            rows.extend(right_path_rows(tree, path.stem, config, report))
        except ValueError as exc:  # TreeFileError is a ValueError
            report.skipped_files[str(path)] = str(exc)
    return rows, report
