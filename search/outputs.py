"""The files of a solved task — ``result.json``, ``tree.json``, ``solution.ipynb``, ``tree.html`` — and of a tree
still growing, written by one module for ``jupiter solve``, the service and the Ray drivers.

Why one writer: a reader (a person, the tree view, a program polling the service's files) should find the same
files with the same meaning whichever way the task ran. Every file is written atomically (a temporary file in
the same folder, renamed over the target), so a download or a reader never sees half a file, and
``result.json`` is written last, so its presence says the other files are complete. The Ray driver's tree and
summary files (``save_tree(..., durable=True)``, ``write_json_atomic``) are also fsynced before the rename: its
manifest line, appended after the tree file, must never survive a crash that the tree file did not. A solved
task's files skip that (about 8 ms a file on a busy disk, on the service's search threads).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

from jupiter.appendlog import replace_atomically
from search.export import path_notebook
from search.html import render_tree_html
from search.notebook_inputs import input_cells, place_inputs
from search.result import SearchResult
from search.tree import Tree
from search.tree_io import save_tree

__all__ = [
    "RESULT_FILE",
    "TREE_FILE",
    "NOTEBOOK_FILE",
    "TREE_VIEW_FILE",
    "WrittenOutputs",
    "write_outputs",
    "write_partial",
    "write_json_atomic",
]

RESULT_FILE = "result.json"
TREE_FILE = "tree.json"
NOTEBOOK_FILE = "solution.ipynb"
TREE_VIEW_FILE = "tree.html"
#: the run folder's own files, which an input of the same name never replaces
RUN_FILES = (RESULT_FILE, TREE_FILE, NOTEBOOK_FILE, TREE_VIEW_FILE, "jupiter.log", "run.json", "checkpoints")


@dataclass(frozen=True)
class WrittenOutputs:
    """What ``write_outputs`` wrote: the folder and the ``result.json`` record (so no caller reads it back)."""

    folder: Path
    record: dict[str, Any]

    def path(self, name: str) -> Path:
        """The path of one of the written files (``RESULT_FILE``, ``TREE_FILE``, ...)."""
        return self.folder / name


def write_json_atomic(data: Any, path: str | Path) -> Path:
    """Write ``data`` as indented JSON (UTF-8) so that ``path`` is either absent or complete."""
    text = json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return replace_atomically(path, lambda tmp: tmp.write_text(text + "\n", encoding="utf-8"), durable=True)


def _write_text_atomic(text: str, path: Path) -> Path:
    return replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _summary(result: SearchResult) -> str:
    """The one line the tree view shows above the tree."""
    outcome = f"answer {result.answer} ({result.decided_by})" if result.answer is not None else "no answer found"
    if result.interrupted:
        outcome += "; interrupted"
    stats = result.stats
    line = (f"{outcome}; {stats.nodes} nodes, {stats.iterations} iterations, {stats.model_calls} model calls, "
            f"{stats.wall_seconds:.1f} s")
    return line + (f"; error: {result.error}" if result.error else "")


def write_outputs(result: SearchResult, out: Path, extra: dict[str, Any] | None = None) -> WrittenOutputs:
    """Write ``result``'s four files into ``out`` (created if absent), with the task's input files beside the
    notebook (``search.notebook_inputs``: hard links, else copies); ``extra`` keys join ``result.json``.

    Without an answer the notebook is still written — the best-valued deepest path, so the work done can be
    read and continued — and its first cell says "no answer"; ``result.json`` has ``no_answer`` and
    ``solution_notebook`` (the notebook's file name) for programs that read it.
    """
    out = Path(out)
    no_answer = result.answer is None
    record = dict(result.to_dict(), no_answer=no_answer, solution_notebook=NOTEBOOK_FILE, **(extra or {}))
    save_tree(result.tree, out / TREE_FILE)
    notebook = path_notebook(result.tree, result.chosen_tag)
    task = result.tree.task if result.tree is not None else None
    if task is not None and task.files:  # so that Run All in this folder finds what the cells read
        placed = place_inputs(task.files, out, reserved=RUN_FILES)
        intro = 1 if notebook.cells and notebook.cells[0].cell_type == "markdown" else 0
        notebook.cells[intro:intro] = input_cells(placed)
        record["inputs"] = {p.name: p.how for p in placed}
    if no_answer:
        stopped = " (the search was stopped early)" if result.interrupted else ""
        notebook.cells.insert(0, nbformat.v4.new_markdown_cell(
            f"**No answer found.** The search ended without a formatted answer{stopped}. This notebook shows "
            "the best-valued deepest path it explored, so the work can be read and continued."))
    _write_text_atomic(nbformat.writes(notebook), out / NOTEBOOK_FILE)
    _write_text_atomic(render_tree_html(result.tree, result.task_id, result.chosen_tag, _summary(result)),
                       out / TREE_VIEW_FILE)
    text = json.dumps(record, indent=2, ensure_ascii=False, default=str) + "\n"
    _write_text_atomic(text, out / RESULT_FILE)
    return WrittenOutputs(out, record)


def write_partial(tree: Tree, out: Path, task_id: str, summary: str) -> None:
    """``tree.json`` and ``tree.html`` of a tree still growing (``summary``: the line above the tree view).

    No ``result.json``: there is no decision yet, and its absence tells a reader the run is not over.
    """
    out = Path(out)
    save_tree(tree, out / TREE_FILE)
    _write_text_atomic(render_tree_html(tree, task_id, None, summary), out / TREE_VIEW_FILE)
