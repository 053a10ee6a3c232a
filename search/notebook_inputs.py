"""A solution notebook's input files, put beside it so that "Run All" (or ``jupyter nbconvert --execute``) in the
run folder reproduces the answer.

Why: the cells read the task's files by bare name, as the sandbox gave them to the search (each input in the
state's working folder). A notebook written away from those files stops at its first cell with
``FileNotFoundError``. Each input is hard-linked into the run folder (no copy, no space, and it survives the
original being moved or deleted); where a hard link cannot be made (another file system, a read-only source) it is
copied, up to ``MAX_COPY_BYTES``; a larger one is linked symbolically from a first code cell, which says so. The
notebook's second cell says where every input came from.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import nbformat

__all__ = ["MAX_COPY_BYTES", "PlacedInput", "place_inputs", "input_cells"]

#: Inputs larger than this are not copied beside the notebook where a hard link fails (a symbolic link then).
MAX_COPY_BYTES = 256 * 2**20


@dataclass(frozen=True)
class PlacedInput:
    """One input and how it reached the run folder: ``how`` is ``hard link``, ``copy``, ``already there``,
    ``symlink cell`` (too large to copy: the first code cell links it) or ``name taken`` (a run file has its
    name: not placed)."""

    name: str
    source: Path
    how: str


def place_inputs(files: Iterable[Path], folder: Path, reserved: Sequence[str] = (),
                 max_copy_bytes: int = MAX_COPY_BYTES) -> list[PlacedInput]:
    """Put each of ``files`` into ``folder`` under its bare name (the name the cells use); ``reserved``: the
    names of the run's own files, never overwritten."""
    placed: list[PlacedInput] = []
    for file in files:
        source = Path(file).resolve()
        target = folder / source.name
        if source.name in reserved:
            placed.append(PlacedInput(source.name, source, "name taken"))
            continue
        if target.exists() and _same_file(source, target):
            placed.append(PlacedInput(source.name, source, "already there"))
            continue
        target.unlink(missing_ok=True)  # an input of an earlier run in this folder, now another file
        try:
            os.link(source, target)
            how = "hard link"
        except OSError:
            if source.stat().st_size > max_copy_bytes:
                how = "symlink cell"
            else:
                shutil.copy2(source, target)
                how = "copy"
        placed.append(PlacedInput(source.name, source, how))
    return placed


def _same_file(source: Path, target: Path) -> bool:
    try:
        if os.path.samefile(source, target):
            return True
        return source.stat().st_size == target.stat().st_size and source.read_bytes() == target.read_bytes()
    except OSError:
        return False


def input_cells(placed: Sequence[PlacedInput]) -> list[nbformat.NotebookNode]:
    """The cells that open the notebook's path: where the data came from (markdown) and, for inputs too large
    to copy, a code cell that links them from where they lie."""
    if not placed:
        return []
    lines = [f"- `{p.name}`: {_describe(p)} `{p.source}`" for p in placed]
    cells = [nbformat.v4.new_markdown_cell("**Data.** The cells read these files by name from this folder:\n\n"
                                           + "\n".join(lines))]
    linked = {p.name: str(p.source) for p in placed if p.how == "symlink cell"}
    if linked:
        cells.append(nbformat.v4.new_code_cell(
            "# inputs too large to copy beside this notebook: linked from where the task found them\n"
            "import os\n"
            f"for _name, _source in {linked!r}.items():\n"
            "    if not os.path.exists(_name):\n"
            "        os.symlink(_source, _name)"))
    return cells


def _describe(placed: PlacedInput) -> str:
    return {"hard link": "a hard link (a cell that writes it changes the original too) to", "copy": "a copy of",
            "already there": "the same file as",
            "symlink cell": "linked by the next cell from",
            "name taken": "NOT placed (a file of the run has its name); read it from"}[placed.how]
