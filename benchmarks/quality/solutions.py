"""The reference solutions the simulated policy draws from: data (``solutions.json``), typed, and the tasks.

Per DABench question: one correct solution, two plausible wrong ones (each a list of cells ending in a cell that
prints its own ``@name[value]`` answer), and erroring cells. The answers are what those cells print: the file is
verified by running every cell in the real sandbox (``benchmarks.quality.verify``), which stamps ``verified``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from jupiter.task import Task, TaskKind

__all__ = ["SOLUTIONS_PATH", "SolutionsError", "Cell", "Solution", "QuestionSolutions", "SolutionSet",
           "load_solutions", "task_for", "tasks_for"]

SOLUTIONS_PATH = Path(__file__).resolve().parent / "solutions.json"


class SolutionsError(ValueError):
    """The solutions file is malformed; the message names the question and the field."""


@dataclass(frozen=True)
class Cell:
    """One step of a solution: the thought the policy writes and the code it runs."""

    thought: str
    code: str


@dataclass(frozen=True)
class Solution:
    """A path of cells; its last cell prints ``answer`` (the text after ``Formatted answer:``)."""

    name: str
    cells: tuple[Cell, ...]
    answer: str


@dataclass(frozen=True)
class QuestionSolutions:
    """Everything the simulated policy knows about one question (it never sees ``label``)."""

    id: int
    level: str
    file: str
    question: str
    label: str
    correct: Solution
    wrong: tuple[Solution, ...]
    errors: tuple[Cell, ...]

    @property
    def solutions(self) -> tuple[Solution, ...]:
        """The correct solution first, then the wrong ones (the policy's solution indices)."""
        return (self.correct, *self.wrong)


@dataclass(frozen=True)
class SolutionSet:
    """The whole file: the questions and the stamp of the last verification (None: never verified)."""

    questions: tuple[QuestionSolutions, ...]
    verified: dict[str, Any] | None
    path: Path

    def by_id(self) -> dict[int, QuestionSolutions]:
        return {q.id: q for q in self.questions}


def _need(data: dict, key: str, where: str) -> Any:
    if key not in data:
        raise SolutionsError(f"{where}: missing '{key}'")
    return data[key]


def _cell(raw: Any, where: str) -> Cell:
    if not isinstance(raw, dict) or not isinstance(raw.get("code"), str) or not raw["code"].strip():
        raise SolutionsError(f"{where}: a cell needs a non-empty 'code' string")
    return Cell(thought=str(raw.get("thought", "")), code=raw["code"])


def _solution(raw: Any, where: str) -> Solution:
    if not isinstance(raw, dict):
        raise SolutionsError(f"{where}: must be an object")
    cells = _need(raw, "cells", where)
    if not isinstance(cells, list) or not 2 <= len(cells) <= 5:
        raise SolutionsError(f"{where}.cells: 2 to 5 cells expected (load, compute, print), got {cells!r:.60}")
    answer = _need(raw, "answer", where)
    if not isinstance(answer, str) or "@" not in answer:
        raise SolutionsError(f"{where}.answer: must be the printed '@name[value]' text, got {answer!r}")
    return Solution(name=str(raw.get("name", "")),
                    cells=tuple(_cell(c, f"{where}.cells[{i}]") for i, c in enumerate(cells)), answer=answer)


def _question(raw: Any, where: str) -> QuestionSolutions:
    if not isinstance(raw, dict):
        raise SolutionsError(f"{where}: must be an object")
    where = f"{where} (id {raw.get('id')})"
    wrong = _need(raw, "wrong", where)
    errors = _need(raw, "errors", where)
    if not isinstance(wrong, list) or len(wrong) < 1:
        raise SolutionsError(f"{where}.wrong: at least one wrong solution expected")
    if not isinstance(errors, list) or not errors:
        raise SolutionsError(f"{where}.errors: at least one erroring cell expected")
    return QuestionSolutions(
        id=int(_need(raw, "id", where)), level=str(_need(raw, "level", where)), file=str(_need(raw, "file", where)),
        question=str(_need(raw, "question", where)), label=str(_need(raw, "label", where)),
        correct=_solution(_need(raw, "correct", where), f"{where}.correct"),
        wrong=tuple(_solution(w, f"{where}.wrong[{i}]") for i, w in enumerate(wrong)),
        errors=tuple(_cell(c, f"{where}.errors[{i}]") for i, c in enumerate(errors)),
    )


def load_solutions(path: str | Path = SOLUTIONS_PATH) -> SolutionSet:
    """Read and check the solutions file; ``SolutionsError`` names the bad question and field."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SolutionsError(f"{path}: not readable JSON: {exc}") from None
    raw = doc.get("questions") if isinstance(doc, dict) else None
    if not isinstance(raw, list) or not raw:
        raise SolutionsError(f"{path}: 'questions' must be a non-empty list")
    questions = tuple(_question(q, f"{path.name}: questions[{i}]") for i, q in enumerate(raw))
    ids = [q.id for q in questions]
    if len(set(ids)) != len(ids):
        raise SolutionsError(f"{path}: duplicate question ids")
    return SolutionSet(questions=questions, verified=doc.get("verified"), path=path)


def task_for(question: QuestionSolutions, dabench_dir: str | Path, record: dict[str, Any] | None = None) -> Task:
    """The DABench task of ``question`` (constraints and format from the official question file when given)."""
    tables = Path(dabench_dir) / "tables"
    record = record or {}
    return Task(
        id=str(question.id), question=question.question, constraints=str(record.get("constraints") or ""),
        format=str(record.get("format") or ""), files=(tables / question.file,), label=question.label,
        concepts=tuple(record.get("concepts") or ()), level=question.level, kind=TaskKind.QA,
        metadata={"benchmark": "dabench"},
    )


def tasks_for(questions: Sequence[QuestionSolutions], dabench_dir: str | Path) -> list[Task]:
    """Tasks for ``questions``, with constraints and format read from ``da-dev-questions.jsonl``."""
    dabench_dir = Path(dabench_dir)
    records: dict[int, dict[str, Any]] = {}
    source = dabench_dir / "da-dev-questions.jsonl"
    if source.is_file():
        for line in source.read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                records[int(record["id"])] = record
    return [task_for(q, dabench_dir, records.get(q.id)) for q in questions]
