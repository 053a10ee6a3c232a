"""AIME 2025: loading the 30 problems, integer answer matching, and OR / Vote accuracy.

OR counts a problem solved when any candidate answer is right; Vote when the majority answer is right.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.dabench import cost_summary
from benchmarks.paths import default_data_dir
from benchmarks.records import CandidateRecord, TaskRecord
from jupiter.answers import extract_answers
from jupiter.task import Task, TaskError, read_jsonl, task_from_aime

__all__ = ["load_aime", "aime_integer", "aime_correct", "aime_vote", "summarize_aime"]


def load_aime(folder: str | Path | None = None, ids: Sequence[str] | None = None,
              limit: int | None = None) -> list[Task]:
    """Read ``aime2025.jsonl`` from ``folder`` (a file path works too)."""
    folder = Path(folder) if folder is not None else default_data_dir("aime2025")
    path = folder if folder.is_file() else folder / "aime2025.jsonl"
    if not path.is_file():
        raise TaskError(f"AIME data: {path} not found (pass --data to the folder holding it)")
    tasks = [task_from_aime(r, where=f"{path}:{n}") for n, r in enumerate(read_jsonl(path), 1)]
    if ids:
        by_id = {t.id: t for t in tasks}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise TaskError(f"AIME data: unknown id(s) {', '.join(unknown[:10])} in {path}")
        tasks = [by_id[i] for i in ids]
    return tasks[:limit] if limit is not None else tasks


def aime_integer(text: str | None) -> int | None:
    """The integer in a reply's ``@answer[...]`` (also ``@answer[070]``, ``@answer[ 70.0 ]``); None otherwise."""
    value = extract_answers(text).get("answer")
    if value is None:
        return None
    try:
        number = float(value.strip().replace(",", ""))
    except ValueError:
        return None
    return int(number) if number.is_integer() else None


def aime_correct(text: str | None, label: str | None) -> bool:
    """Exact integer match of the reply's answer with the label's."""
    truth = aime_integer(label)
    return truth is not None and aime_integer(text) == truth


def aime_vote(candidates: Sequence[CandidateRecord]) -> int | None:
    """The majority integer among the candidates (ties: the one found first); None without any integer."""
    counts: dict[int, int] = {}
    for candidate in candidates:
        number = aime_integer(candidate.answer)
        if number is not None:  # a node kept for several identical replies counts each of them
            counts[number] = counts.get(number, 0) + max(1, candidate.multiplicity)
    return max(counts, key=lambda k: counts[k]) if counts else None  # dicts keep insertion order: first wins ties


def summarize_aime(records: Sequence[TaskRecord], total: int | None = None) -> dict[str, Any]:
    """OR, Vote, value-selected and decided-answer accuracy over ``total`` problems (default: the records)."""
    n = total or len(records) or 1
    or_right = sum(any(aime_correct(c.answer, r.label) for c in r.candidates) for r in records)
    vote_right = sum(aime_vote(r.candidates) == aime_integer(r.label) and aime_vote(r.candidates) is not None
                     for r in records)
    value_right = sum(aime_correct(r.value_answer, r.label) for r in records)
    final_right = sum(aime_correct(r.answer, r.label) for r in records)
    return {
        "benchmark": "aime2025",
        "problems": n,
        "finished": len(records),
        "metrics": {"or": or_right / n, "vote": vote_right / n,
                    "value": value_right / n if any(r.value_answer is not None for r in records) else None,
                    "final": final_right / n},
        **cost_summary(records),
    }
