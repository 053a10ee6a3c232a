"""Export a path of executed cells as a valid nbformat v4 notebook (outputs included)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import nbformat
from nbformat import v4

from sandbox.execution import Execution

__all__ = ["to_notebook", "output_to_node"]

_PYTHON_META = {
    "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
    "language_info": {"name": "python"},
}


def output_to_node(output: dict[str, Any], execution_count: int | None) -> nbformat.NotebookNode:
    """One nbformat output node from a sandbox output dict."""
    kind = output["output_type"]
    if kind == "stream":
        return v4.new_output("stream", name=output["name"], text=output["text"])
    if kind == "execute_result":
        return v4.new_output("execute_result", data=output["data"], metadata=output.get("metadata", {}),
                             execution_count=execution_count)
    if kind == "display_data":
        return v4.new_output("display_data", data=output["data"], metadata=output.get("metadata", {}))
    if kind == "error":
        return v4.new_output("error", ename=output["ename"], evalue=output["evalue"],
                             traceback=list(output.get("traceback", [])))
    raise ValueError(f"unknown output_type {kind!r}")


def to_notebook(cells: Iterable[tuple[str, Execution | None]], metadata: dict[str, Any] | None = None,
                markdown: Iterable[tuple[int, str]] = (), validate: bool = True) -> nbformat.NotebookNode:
    """Build a notebook from ``(code, execution)`` pairs in path order (execution None: a cell not run).

    ``markdown`` holds ``(index, text)`` pairs: a markdown cell is placed before code cell ``index`` (e.g. the
    task question before cell 0, or the model's thought before each cell). ``metadata`` is merged into the
    notebook metadata (default: a Python 3 kernelspec). The result passes ``nbformat.validate``.
    """
    notes: dict[int, list[str]] = {}
    for index, text in markdown:
        notes.setdefault(int(index), []).append(text)
    nb = v4.new_notebook()
    nb.metadata.update(_PYTHON_META)
    if metadata:
        nb.metadata.update(metadata)
    count = 0
    items = list(cells)
    for i, (code, execution) in enumerate(items):
        for text in notes.get(i, ()):
            nb.cells.append(v4.new_markdown_cell(text))
        cell = v4.new_code_cell(code)
        if execution is not None:
            count = execution.execution_count or count + 1
            cell.execution_count = count
            cell.outputs = [output_to_node(o, count) for o in execution.outputs]
            cell.metadata["sandbox"] = {"status": execution.status.value,
                                        "duration_s": round(execution.duration_s, 6)}
        nb.cells.append(cell)
    for text in notes.get(len(items), ()):
        nb.cells.append(v4.new_markdown_cell(text))
    if validate:
        nbformat.validate(nb)
    return nb
