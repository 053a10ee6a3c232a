"""NbQA records as a benchmark folder in InfiAgent-DABench's layout, so the bench commands run on them.

Why: the paper's second stage collects search trees with rewards from reference labels on *training* tasks, never
on the benchmark. ``jupiter bench dabench --data DIR --mode collect`` already does collection, scoring and resume
for a folder in DABench's layout (``da-dev-questions.jsonl``, ``da-dev-labels.jsonl``, ``tables/``); writing
synthesized (or crawled) NbQA tasks in that layout reuses all of it instead of a second collection command.
A record needs one data file and a label of ``@name[value]`` answers; others are skipped and counted.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupiter.answers import extract_answers

__all__ = ["LayoutReport", "write_dabench_layout"]


@dataclass(frozen=True)
class LayoutReport:
    written: int
    skipped_files: int  # not exactly one data file, or the file is not in the tables folder
    skipped_label: int  # no @name[value] answer in the label


def write_dabench_layout(records: Iterable[Mapping[str, Any]], tables: Path, out_dir: Path,
                         limit: int | None = None) -> LayoutReport:
    """Write ``records`` (NbQA records, ``nbqa.jsonl`` rows) to ``out_dir`` in DABench's layout, copying each
    record's data file from ``tables``; at most ``limit`` tasks."""
    questions: list[dict[str, Any]] = []
    labels: list[dict[str, Any]] = []
    skipped_files = skipped_label = 0
    (out_dir / "tables").mkdir(parents=True, exist_ok=True)
    for record in records:
        if limit is not None and len(questions) >= limit:
            break
        names = list(record.get("file_names") or [])
        if len(names) != 1 or not (tables / names[0]).is_file():
            skipped_files += 1
            continue
        answers = extract_answers(record.get("label"))
        if not answers:
            skipped_label += 1
            continue
        target = out_dir / "tables" / names[0]
        if not target.exists():
            shutil.copyfile(tables / names[0], target)
        questions.append({"id": str(record["id"]), "question": record["task"],
                          "concepts": list(record.get("concepts") or []),
                          "constraints": record.get("constraints") or "", "format": record.get("format") or "",
                          "file_name": names[0], "level": record.get("difficulty") or ""})
        labels.append({"id": str(record["id"]), "common_answers": [[k, v] for k, v in answers.items()]})
    for name, rows in (("da-dev-questions.jsonl", questions), ("da-dev-labels.jsonl", labels)):
        (out_dir / name).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return LayoutReport(len(questions), skipped_files, skipped_label)
