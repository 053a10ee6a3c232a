"""Count the data rows of a file the way the notebook reads it.

Why use the notebook's own call options: the row count decides the "< 20 rows" filter, and a file read with
``header=None`` or ``sep=';'`` has a different number of rows than a plain ``read_csv`` would see. Only
literal options found by ``deps`` are used; anything that fails falls back to counting non-blank lines.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from nbqa_pipeline.deps import DataRef, ReadKind

__all__ = ["count_rows", "is_lfs_pointer", "MAX_COUNT_BYTES"]

log = logging.getLogger(__name__)

MAX_COUNT_BYTES = 256 * 2**20  # larger files are certainly big enough; do not parse them
_LFS_HEADER = b"version https://git-lfs.github.com/spec/v1"
_CSV_OPTIONS = ("sep", "delimiter", "header", "names", "skiprows", "skipfooter", "encoding", "comment",
                "delim_whitespace", "engine", "index_col")


def is_lfs_pointer(path: Path) -> bool:
    """True when the file is a Git LFS pointer (the repository does not hold the real data)."""
    try:
        with path.open("rb") as handle:
            return handle.read(len(_LFS_HEADER)) == _LFS_HEADER
    except OSError:
        return False


def _line_rows(path: Path, header_lines: int) -> int:
    data = path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    lines = [ln for ln in data.split(b"\n") if ln.strip() and not ln.lstrip().startswith(b"#")]
    return max(0, len(lines) - header_lines)


def _pandas_rows(path: Path, ref: DataRef) -> int | None:
    import pandas as pd  # heavy; only the filter stage needs it

    options: dict[str, Any] = dict(ref.options)
    call = ref.call
    if call in {"read_csv", "read_table"}:
        kwargs = {k: options[k] for k in _CSV_OPTIONS if k in options}
        if call == "read_table" and "sep" not in kwargs and "delimiter" not in kwargs:
            kwargs["sep"] = "\t"
        frame = pd.read_csv(path, **kwargs)
        return int(len(frame))
    if call == "read_excel":
        kwargs = {k: options[k] for k in ("sheet_name", "header", "skiprows", "names") if k in options}
        frame = pd.read_excel(path, **kwargs)
        if isinstance(frame, dict):
            return max((len(f) for f in frame.values()), default=0)
        return int(len(frame))
    if call == "read_json":
        kwargs = {k: options[k] for k in ("lines", "orient", "encoding", "compression") if k in options}
        return int(len(pd.read_json(path, **kwargs)))
    if call == "read_parquet":
        return int(len(pd.read_parquet(path)))
    if call == "read_feather":
        return int(len(pd.read_feather(path)))
    if call == "read_fwf":
        return int(len(pd.read_fwf(path)))
    if call == "read_pickle":
        value = pd.read_pickle(path)
        return int(len(value)) if hasattr(value, "__len__") else None
    return None


def count_rows(path: Path, ref: DataRef) -> int | None:
    """Data rows of ``path`` as ``ref``'s call reads it; None when the kind of read has no rows.

    Files over ``MAX_COUNT_BYTES`` are not parsed: they count as ``10**9`` rows (certainly enough).
    """
    if ref.kind in (ReadKind.OPEN, ReadKind.SQLITE):
        return None
    if path.stat().st_size > MAX_COUNT_BYTES:
        return 10**9
    if ref.kind is ReadKind.NUMPY:
        skip = dict(ref.options).get("skiprows", dict(ref.options).get("skip_header", 0))
        return _line_rows(path, int(skip) if isinstance(skip, int) else 0)
    try:
        return _pandas_rows(path, ref)
    except Exception as exc:  # pandas raises many parser errors; the line count is the fallback
        log.debug("%s: pandas could not read it (%s); counting lines", path, exc)
        try:
            return _line_rows(path, 1)
        except OSError:
            return None
