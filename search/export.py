"""Exports of a tree: the chosen path as a real notebook (``solution.ipynb``), with the cells' recorded outputs,
and the tree in the paper code's layout (full ``messages`` per node) for users of its scripts.

Paper layout, from the command line (writes one file per tree into ``--out``)::

    python -m search.tree_cli paper trees/*.json --out paper-trees/
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupiter.appendlog import replace_atomically
from search.tree import Node, Tree

__all__ = ["solution_path", "path_notebook", "PAPER_FIELDS", "PAPER_EXTRA_FIELDS", "paper_records",
           "save_paper_tree"]

#: The node fields of the paper's tree files.
PAPER_FIELDS = ("tag", "depth", "messages", "is_terminal", "visit_count", "value_sum", "value")
#: Ours, kept beside them because they cost little and say what the messages cannot: why a branch ended (an
#: infrastructure failure is not the model's fault, and the value-model extractor skips it) and the answer.
PAPER_EXTRA_FIELDS = ("status", "exec_status", "terminal_reason", "final_answer")


def solution_path(tree: Tree, tag: str | None) -> list[Node]:
    """Root … the node ``tag``; without one, the path to the best-valued deepest live node."""
    if tag is not None and tag in tree:
        return tree[tag].path()
    live = [n for n in tree.nodes if not n.is_terminal] or [tree.root]
    best = max(live, key=lambda n: (n.value, n.depth, -n.order))
    return best.path()


def _execution(node: Node) -> Any:
    """The node's execution; for a tree read from a file, rebuilt from the saved outputs."""
    if node.execution is not None or not node.outputs:
        return node.execution
    from sandbox import ExecStatus, Execution

    try:
        status = ExecStatus(node.exec_status or "ok")
    except ValueError:
        status = ExecStatus.DIED
    return Execution(code=node.code or "", status=status, outputs=tuple(node.outputs),
                     duration_s=float(node.timings.get("cell_s", 0.0)))


def path_notebook(tree: Tree, tag: str | None, metadata: dict[str, Any] | None = None) -> Any:
    """An ``nbformat`` v4 notebook of the path to ``tag``: the task, each thought, each cell with its outputs,
    and the final answer. Built by ``sandbox.notebook.to_notebook`` (which validates it)."""
    from sandbox.notebook import to_notebook

    path = solution_path(tree, tag)
    task = tree.task
    cells: list[tuple[str, Any]] = []
    markdown: list[tuple[int, str]] = []
    if task is not None:
        intro = f"# {task.id}\n\n**Task:** {task.question}"
        if task.constraints:
            intro += f"\n\n**Constraints:** {task.constraints}"
        if task.format:
            intro += f"\n\n**Answer format:** {task.format}"
        markdown.append((0, intro))
        if task.setup.strip():  # ran once in the root state: the path's cells need it to rerun
            markdown.append((0, "**Setup cell** (run once before the search; every step starts from it)"))
            cells.append((task.setup, _execution(tree.root)))
    for node in path[1:]:
        if node.code is not None and node.code.strip():
            if node.thought:
                markdown.append((len(cells), f"**Thought:** {node.thought}"))
            cells.append((node.code, _execution(node)))
        elif node.final_answer is not None:
            text = f"**Thought:** {node.thought}\n\n" if node.thought else ""
            markdown.append((len(cells), f"{text}**Formatted answer:** `{node.final_answer}`"))
    meta = {"jupiter": {"task_id": task.id if task else None, "tag": path[-1].tag,
                        "answer": path[-1].final_answer}}
    meta["jupiter"].update(metadata or {})
    return to_notebook(cells, metadata=meta, markdown=markdown)


def paper_records(tree: Tree) -> list[dict[str, Any]]:
    """The tree as the paper's code writes it: a list of nodes in creation order, each with its full path as
    ``messages`` (``PAPER_FIELDS``, then ``PAPER_EXTRA_FIELDS``). Sizes grow with depth squared; our own
    files (``search.tree_io``) store each turn once."""
    records = []
    for node in tree.nodes:
        records.append({
            "tag": node.tag,
            "depth": node.depth,
            "messages": tree.messages(node),
            "is_terminal": node.is_terminal,
            "visit_count": node.visit_count,
            "value_sum": node.value_sum,
            "value": node.value,
            "status": node.status.value,
            "exec_status": node.exec_status,
            "terminal_reason": node.terminal.value if node.terminal else None,
            "final_answer": node.final_answer,
        })
    return records


def save_paper_tree(tree: Tree, path: str | Path) -> Path:
    """Write ``paper_records(tree)`` as JSON (UTF-8, atomically via a temporary file). Returns the path."""
    text = json.dumps(paper_records(tree), ensure_ascii=False, indent=1)
    return replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))

