"""Reading a notebook file into the few facts the filters and the extractor need.

Why a module of its own: crawled notebooks are often not quite valid nbformat (missing keys, sources
stored as strings or lists, v3 files). Everything downstream reads notebooks through ``load_notebook`` so
that what is normalised — and what is rejected, with which reason — is decided in one place.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat

__all__ = [
    "Cell", "LoadedNotebook", "NotebookError", "InvalidCause", "load_notebook", "parse_notebook",
    "clean_code",
]

log = logging.getLogger(__name__)

_MAGIC_LINE = re.compile(r"^\s*(%|!|\?)")


class InvalidCause(str, enum.Enum):
    """Why a file is not a usable notebook (counted separately in the stats report)."""

    UNREADABLE = "unreadable"  # I/O error or not UTF-8
    NOT_JSON = "not_json"
    NOT_NOTEBOOK = "not_notebook"  # JSON, but not a notebook document
    INVALID_NBFORMAT = "invalid_nbformat"  # still invalid after nbformat's safe normalisation


class NotebookError(ValueError):
    """The file is not a usable notebook; the message names the file and the problem."""

    def __init__(self, message: str, cause: InvalidCause) -> None:
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class Cell:
    """One cell in document order (markdown, code or raw)."""

    index: int
    cell_type: str
    source: str
    execution_count: int | None = None
    outputs: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class LoadedNotebook:
    """A notebook that passed nbformat validation (after safe normalisation)."""

    path: Path
    node: nbformat.NotebookNode
    cells: tuple[Cell, ...]

    @property
    def code_cells(self) -> tuple[Cell, ...]:
        """The code cells, each with its position among all cells (``index``): used to find nearby markdown."""
        return tuple(c for c in self.cells if c.cell_type == "code")

    def markdown_before(self, index: int, limit: int = 2) -> list[str]:
        """The sources of up to ``limit`` markdown cells right before cell ``index`` (nearest first)."""
        found: list[str] = []
        for cell in reversed(self.cells[:index]):
            if cell.cell_type == "markdown":
                found.append(cell.source)
                if len(found) >= limit:
                    break
            elif cell.cell_type == "code" and found:
                break
        return found


def _source(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(v) for v in value)
    return "" if value is None else str(value)


def parse_notebook(text: str, path: Path) -> LoadedNotebook:
    """Parse and validate notebook JSON text; raise NotebookError naming ``path`` when unusable.

    Safe normalisation (nbformat's own ``normalize``: missing ids, list sources) is applied before
    validation; v3 notebooks are upgraded to v4. Anything still invalid is rejected.
    """
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})", InvalidCause.NOT_JSON) from None
    if not isinstance(raw, dict) or ("cells" not in raw and "worksheets" not in raw):
        raise NotebookError(f"{path}: JSON is not a notebook (no 'cells')", InvalidCause.NOT_NOTEBOOK)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # nbformat warns about what normalize() below fixes
            node = nbformat.reads(text, as_version=4)
            _, normalised = nbformat.validator.normalize(node)
            node = nbformat.from_dict(normalised)
            nbformat.validate(node)
    except nbformat.ValidationError as exc:
        raise NotebookError(f"{path}: not valid nbformat v4 ({exc.message})", InvalidCause.INVALID_NBFORMAT) from None
    except Exception as exc:  # nbformat raises many types for malformed input
        raise NotebookError(f"{path}: nbformat cannot read it ({type(exc).__name__}: {exc})",
                            InvalidCause.INVALID_NBFORMAT) from None
    cells = []
    for index, cell in enumerate(node.cells):
        kind = cell.get("cell_type", "")
        outputs = tuple(dict(o) for o in cell.get("outputs", ())) if kind == "code" else ()
        count = cell.get("execution_count") if kind == "code" else None
        cells.append(Cell(index, kind, _source(cell.get("source")), count, outputs))
    return LoadedNotebook(path=path, node=node, cells=tuple(cells))


def load_notebook(path: str | Path) -> LoadedNotebook:
    """Read and validate the notebook at ``path`` (see ``parse_notebook``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise NotebookError(f"{path}: cannot read ({exc})", InvalidCause.UNREADABLE) from None
    return parse_notebook(text, path)


def clean_code(source: str) -> str:
    """The cell's source with IPython magics, shell escapes and help lines turned into comments.

    Why: ``ast`` must parse the cell to find the data files it reads; the line numbers stay the same.
    A cell magic (``%%bash``) makes the whole cell non-Python, so it becomes all comments.
    """
    lines = source.splitlines()
    if lines and lines[0].lstrip().startswith("%%"):
        return "\n".join("# " + line for line in lines)
    return "\n".join(("# " + line) if _MAGIC_LINE.match(line) else line for line in lines)
