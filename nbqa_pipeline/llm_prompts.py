"""The prompts of the LLM extraction stages, written for this project.

They follow the intent of the NbQA paper's stages (score a notebook, list its models, pose tasks, write
constraints/format/label, rebuild a solution from the notebook's own cells, check the answer, check the
constraints) and the same JSON contract, in our own words. Each builder returns chat messages; the reply
must be a single JSON object (a fenced ```json block is accepted too).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CONCEPTS",
    "CLASSICAL_MODELS",
    "ANSWER_CRITERIA",
    "CONSTRAINT_CRITERIA",
    "quality_messages",
    "models_messages",
    "tasks_messages",
    "constraints_messages",
    "solution_messages",
    "answer_check_messages",
    "constraint_check_messages",
    "retry_message",
]

# The eight task categories of DABench / NbQA.
CONCEPTS: tuple[str, ...] = (
    "Summary Statistics", "Feature Engineering", "Correlation Analysis", "Machine Learning",
    "Distribution Analysis", "Outlier Detection", "Comprehensive Data Preprocessing", "Time Series Analysis",
)

# Classical (non-neural) models a kept notebook may fit — 21 families.
CLASSICAL_MODELS: tuple[str, ...] = (
    "Linear Regression", "Logistic Regression", "Ridge Regression", "Lasso Regression", "Elastic Net",
    "Polynomial Regression", "Decision Tree", "Random Forest", "Gradient Boosting", "XGBoost", "LightGBM",
    "AdaBoost", "Support Vector Machine", "K-Nearest Neighbors", "Naive Bayes", "K-Means", "DBSCAN",
    "Hierarchical Clustering", "Principal Component Analysis", "ARIMA", "Linear Discriminant Analysis",
)

ANSWER_CRITERIA: tuple[tuple[str, str], ...] = (
    ("answerable_from_data", "The question can be answered using only the listed data files."),
    ("answer_in_notebook", "The given answer is shown (or directly computed) in the notebook's outputs."),
    ("unambiguous", "The question has one correct answer; two careful analysts would agree on it."),
    ("no_leak", "The question does not reveal its own answer."),
    ("solution_reaches_answer", "Running the solution steps in order produces the answer."),
)

CONSTRAINT_CRITERIA: tuple[tuple[str, str], ...] = (
    ("constraints_consistent", "The constraints describe the method the notebook actually used."),
    ("format_matches_label", "Every @name in the label appears in the format, with the described value type."),
    ("label_matches_outputs", "The label's values agree with the notebook's outputs (after stated rounding)."),
)

_SYSTEM = (
    "You help build a benchmark of data-analysis exercises from real Jupyter notebooks. "
    "Answer with one JSON object and nothing else."
)


def _user(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": _SYSTEM}, {"role": "user", "content": text}]


def quality_messages(notebook_md: str) -> list[dict[str, str]]:
    return _user(
        "Judge whether the notebook below is a good source of exercises whose answers can be checked.\n"
        "Give a score from 1 to 5: 1 = no real analysis of data (setup, plots only, or broken), "
        "3 = a readable analysis of tabular data with some concrete numeric results, "
        "5 = a clear, well-explained, multi-step analysis whose outputs show precise results.\n"
        'Reply as {"score": <integer 1-5>, "reason": "<one sentence>"}.\n\n'
        f"Notebook:\n{notebook_md}"
    )


def models_messages(notebook_md: str) -> list[dict[str, str]]:
    listing = ", ".join(CLASSICAL_MODELS)
    return _user(
        "Name every machine-learning model that the notebook below trains or fits. Use a name from this "
        f"list when one fits: {listing}. Name any other model (a neural network, a transformer, a "
        "pre-trained model) as it is usually called. Statistical tests and plain summaries are not models.\n"
        'Reply as {"models": ["<name>", ...]} — an empty list when no model is fitted.\n\n'
        f"Notebook:\n{notebook_md}"
    )


def tasks_messages(notebook_md: str, file_names: Sequence[str], max_tasks: int) -> list[dict[str, str]]:
    return _user(
        f"Write up to {max_tasks} self-contained questions that an analyst could answer with code from "
        f"these data files only: {', '.join(file_names) or '(none)'}. Each question must have a definite "
        "answer that the notebook below computes and shows in its outputs; copy that answer exactly. "
        "Prefer questions that need several steps (cleaning, grouping, modelling) over look-ups. Do not "
        "mention the notebook in a question.\n"
        f"For each, give 1-3 concepts from: {', '.join(CONCEPTS)}; and a difficulty: easy, medium or hard.\n"
        'Reply as {"tasks": [{"task": "...", "answer": "...", "concepts": ["..."], '
        '"difficulty": "easy|medium|hard"}]}.\n\n'
        f"Notebook:\n{notebook_md}"
    )


def constraints_messages(notebook_md: str, task: Mapping[str, Any]) -> list[dict[str, str]]:
    return _user(
        "For the question below, write:\n"
        "- constraints: the method details a solver must follow to reach the notebook's exact answer "
        "(columns, filters, parameters, random seeds, rounding);\n"
        "- format: how to state the answer, one @name[description] per value, e.g. "
        "'@mean_price[value] where value is a float rounded to two decimals';\n"
        "- label: the notebook's answer in that form, e.g. '@mean_price[12.35]'. At most 5 @name[...] "
        "parts, 150 characters in all.\n"
        'Reply as {"constraints": "...", "format": "...", "label": "..."}.\n\n'
        f"Question: {task['task']}\nNotebook's answer: {task['answer']}\n\nNotebook:\n{notebook_md}"
    )


def solution_messages(notebook_md: str, task: Mapping[str, Any]) -> list[dict[str, str]]:
    return _user(
        "Rebuild, from the notebook's own code cells, the shortest sequence of steps that answers the "
        "question below. Each step has a thought (why this step), python_code (taken from the notebook, "
        "trimmed to what the question needs, reading the data files by their plain names) and code_output "
        "(what the notebook showed for it). Use no cell the notebook does not have. End with the label.\n"
        'Reply as {"steps": [{"thought": "...", "python_code": "...", "code_output": "..."}], '
        '"final_label": "@name[value] ..."}.\n\n'
        f"Question: {task['task']}\nConstraints: {task.get('constraints', '')}\n"
        f"Format: {task.get('format', '')}\nLabel: {task.get('label', '')}\n\nNotebook:\n{notebook_md}"
    )


def _criteria_block(criteria: Sequence[tuple[str, str]]) -> str:
    lines = "\n".join(f"- {key}: {text}" for key, text in criteria)
    shape = json.dumps({"checks": {key: "yes|no" for key, _ in criteria}, "reason": "..."})
    return f"Answer yes or no for each criterion:\n{lines}\nReply as {shape}."


def answer_check_messages(notebook_md: str, task: Mapping[str, Any]) -> list[dict[str, str]]:
    steps = "\n\n".join(
        f"Step {i}: {s.get('thought', '')}\n{s.get('python_code', '')}" for i, s in enumerate(task.get("steps", ()), 1)
    )
    return _user(
        "Check the exercise below against the notebook it came from.\n"
        f"{_criteria_block(ANSWER_CRITERIA)}\n\n"
        f"Question: {task['task']}\nData files: {', '.join(task.get('file_names', ()))}\n"
        f"Answer: {task['answer']}\nSolution:\n{steps}\n\nNotebook:\n{notebook_md}"
    )


def constraint_check_messages(notebook_md: str, task: Mapping[str, Any]) -> list[dict[str, str]]:
    return _user(
        "Check the constraints, answer format and label of the exercise below against the notebook.\n"
        f"{_criteria_block(CONSTRAINT_CRITERIA)}\n\n"
        f"Question: {task['task']}\nConstraints: {task.get('constraints', '')}\n"
        f"Format: {task.get('format', '')}\nLabel: {task.get('label', '')}\n\nNotebook:\n{notebook_md}"
    )


def retry_message(problem: str) -> dict[str, str]:
    """What we tell the model after an unusable reply, before the next attempt."""
    return {"role": "user",
            "content": f"That reply could not be used: {problem}. Reply again with only the JSON object."}
