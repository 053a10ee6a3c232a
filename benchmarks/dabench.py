"""InfiAgent-DABench: loading the questions and labels, per-answer correctness, and the run summary.

Metrics are the official ones computed by ``jupiter.answers.score_dabench`` (ABQ / PASQ / UASQ with the
official denominators and the strict ones over every label), plus per level and concept, candidates found,
iterations, nodes, model calls and time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.paths import default_data_dir
from benchmarks.records import TaskRecord
from jupiter.answers import extract_answers, official_match, score_dabench
from jupiter.task import Task, TaskError, read_jsonl, task_from_dabench

__all__ = ["DabenchData", "load_dabench", "dabench_correct", "summarize_dabench", "official_responses",
           "KNOWN_BAD_LABELS"]

#: label problems documented with the data (kept, reported)
KNOWN_BAD_LABELS = {"116": "empty", "352": "empty", "473": "empty", "273": "'['", "743": "a file path"}


@dataclass(frozen=True)
class DabenchData:
    """The benchmark copy: tasks in file order, the raw label and question records, and the folder."""

    tasks: tuple[Task, ...]
    labels: tuple[dict[str, Any], ...]
    questions: tuple[dict[str, Any], ...]
    folder: Path

    def label_for(self, task_id: str) -> dict[str, Any] | None:
        return next((label for label in self.labels if str(label["id"]) == str(task_id)), None)


def load_dabench(
    folder: str | Path | None = None,
    ids: Sequence[str] | None = None,
    limit: int | None = None,
) -> DabenchData:
    """Read ``da-dev-questions.jsonl``, ``da-dev-labels.jsonl`` and ``tables/`` from ``folder``.

    ``ids`` keeps only those questions (in the given order); ``limit`` keeps the first N after that.
    Raises TaskError naming a missing file, an unknown id, or a question whose table is missing.
    """
    folder = Path(folder) if folder is not None else default_data_dir("dabench")
    questions_path = folder / "da-dev-questions.jsonl"
    labels_path = folder / "da-dev-labels.jsonl"
    for path in (questions_path, labels_path):
        if not path.is_file():
            raise TaskError(f"DABench data: {path} not found (pass --data to the folder holding it)")
    questions = read_jsonl(questions_path)
    labels = read_jsonl(labels_path)
    label_by_id = {str(r["id"]): r for r in labels}
    by_id = {str(q["id"]): q for q in questions}
    if ids:
        unknown = [i for i in ids if str(i) not in by_id]
        if unknown:
            raise TaskError(f"DABench data: unknown question id(s) {', '.join(map(str, unknown[:10]))} "
                            f"in {questions_path}")
        questions = [by_id[str(i)] for i in ids]
    if limit is not None:
        questions = questions[: max(0, limit)]
    bases = [folder / "tables", folder]
    tasks = []
    for number, question in enumerate(questions, 1):
        where = f"{questions_path}:{question.get('id', number)}"
        task = task_from_dabench(question, label_by_id.get(str(question["id"])), bases, where)
        tasks.append(task.with_files_checked())
    kept = {str(q["id"]) for q in questions}
    return DabenchData(
        tasks=tuple(tasks),
        labels=tuple(r for r in labels if str(r["id"]) in kept),
        questions=tuple(questions),
        folder=folder,
    )


def dabench_correct(text: str | None, label: Mapping[str, Any] | None) -> bool:
    """The official verdict for one response: every sub-answer of the label matches (official rule)."""
    if label is None or not text:
        return False
    predicted = extract_answers(text)
    return all(official_match(predicted.get(str(name)), str(value)) for name, value in label["common_answers"])


def official_responses(records: Sequence[TaskRecord]) -> list[dict[str, Any]]:
    """The official ``{"id", "response"}`` layout (ids as ints where they are ints in the benchmark)."""
    return [{"id": int(r.id) if r.id.isdigit() else r.id, "response": r.answer or ""} for r in records]


def summarize_dabench(records: Sequence[TaskRecord], data: DabenchData) -> dict[str, Any]:
    """Official + strict metrics over the run's questions, and the search's cost figures.

    The strict denominators are the questions of ``data`` (the selected ones); unanswered ones count wrong.
    """
    responses = official_responses(records)
    score = score_dabench(responses, list(data.labels), list(data.questions))
    # the value-selected and any-candidate figures next to the decided answer's
    by_id = {r.id: r for r in records}
    value_right = vote_right = or_right = 0
    for label in data.labels:
        record = by_id.get(str(label["id"]))
        if record is None:
            continue
        value_right += dabench_correct(record.value_answer, label)
        vote_right += dabench_correct(record.vote_answer, label)
        or_right += any(dabench_correct(c.answer, label) for c in record.candidates)
    n = len(data.labels) or 1
    return {
        "benchmark": "dabench",
        "questions": len(data.labels),
        "finished": len(records),
        "metrics": score.to_dict(),
        # null, not 0, when no value model scored the run (its Q-values are then meaningless)
        "abq_value_selected_strict": (value_right / n if any(r.value_answer is not None for r in records)
                                      else None),
        "abq_vote_strict": vote_right / n,
        "abq_any_candidate_strict": or_right / n,
        "known_bad_labels": {k: v for k, v in KNOWN_BAD_LABELS.items()
                             if any(str(label["id"]) == k for label in data.labels)},
        **cost_summary(records),
    }


def _model_time(records: Sequence[TaskRecord]) -> dict[str, Any]:
    """The policy's and the value model's wall time (the trees' shares of their calls, summed), and each per new
    node: the value model's share of a node against the policy's (the scoring-cost target: at most half)."""
    nodes = sum(max(r.nodes - 1, 0) for r in records) or 1  # every node but the roots came from a reply
    model = sum(float(r.stats.get("model_seconds") or 0.0) for r in records)
    value = sum(float(r.stats.get("value_seconds") or 0.0) for r in records)
    return {"model_seconds_total": round(model, 3), "value_seconds_total": round(value, 3),
            "model_seconds_per_node": round(model / nodes, 4), "value_seconds_per_node": round(value / nodes, 4),
            "value_to_model_time": round(value / model, 4) if model else None}


def cost_summary(records: Sequence[TaskRecord]) -> dict[str, Any]:
    """Totals and means of candidates, iterations, nodes, model calls, tokens and time."""
    n = len(records) or 1
    tokens = sum(int(r.stats.get("completion_tokens") or 0) for r in records)
    return {
        "candidates_mean": sum(len(r.candidates) for r in records) / n,
        "iterations_mean": sum(r.iterations for r in records) / n,
        "nodes_total": sum(r.nodes for r in records),
        "model_calls_total": sum(r.model_calls for r in records),
        "completion_tokens_total": tokens,
        "kernel_seconds_total": round(sum(float(r.stats.get("kernel_seconds") or 0.0) for r in records), 3),
        **_model_time(records),
        "seconds_total": round(sum(r.seconds for r in records), 3),
        "errors": sum(1 for r in records if r.error),
    }
