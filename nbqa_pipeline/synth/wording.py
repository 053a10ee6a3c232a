"""Loose column wording: questions that name a column the way people write, not the way the file spells it.

Why: DABench and NbQA questions rarely quote the exact column name ("the mean fare paid by the passengers" for
the column ``Fare``; "applicant income" for ``ApplicantIncome``). A policy fine-tuned only on questions that
quote exact names writes the question's words as the key (``df['fare']``) and fails with a KeyError — the most
common cell error of the first fine-tuned default on DABench dev (58 of its failing cells). In a loosely worded
task the question and constraints name each column in plain words (lower case, words split at ``_``, ``.`` and
camel case, no quotes), the solution still inspects the table first, and its first computing step says which
printed column each phrase is (``"fare" is the column 'Fare'.``) before using the exact name in code — the
habit of reading the column list that the model must learn. Described wording (recipe 3) goes further and
names a column by what its help page says it means (``nbqa_pipeline.synth.descriptions``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from nbqa_pipeline.synth.programs import Draft, Step
from nbqa_pipeline.synth.tables import TableInfo

__all__ = ["loose_name", "loosen", "title_case_columns"]

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


def loose_name(column: str) -> str | None:
    """The column in plain words (``ApplicantIncome`` -> ``applicant income``, ``Sepal.Length`` ->
    ``sepal length``); None when that is the name itself or leaves no words."""
    words = re.sub(r"[._\s]+", " ", _CAMEL.sub(" ", column)).strip().lower()
    words = re.sub(r"\s+", " ", words)
    if not words or words == column or not re.search(r"[a-z]", words):
        return None
    return words


def _pattern(column: str) -> re.Pattern[str]:
    """The column's mentions in a text: quoted ("col", 'col') or bare as a whole word."""
    name = re.escape(column)
    return re.compile(rf"\"{name}\"|'{name}'|(?<![\w.'\"]){name}(?![\w'\"]|\.\w)")


def _first_mention(words: str, text: str) -> int:
    found = re.search(rf"(?<!\w){re.escape(words)}(?!\w)", text)
    return found.start() if found else len(text)


def loosen(draft: Draft, columns: tuple[str, ...], phrases: Mapping[str, str] | None = None) -> Draft | None:
    """The draft with every column of ``columns`` that its question or constraints mention reworded loosely,
    and a mapping sentence in front of its first step's thought; None when no mentioned column has a loose
    form different from its name (nothing to learn) or two columns would read the same.

    ``phrases``: what columns mean (``TableInfo.phrases``, from the table's help page); a column that has one is
    named by it ("number of years married" for ``yearsmarried``), the others by their plain words."""
    mentioned = [c for c in sorted(columns, key=len, reverse=True)
                 if _pattern(c).search(draft.question) or _pattern(c).search(draft.constraints)]
    loose = {c: (phrases or {}).get(c) or loose_name(c) for c in mentioned}
    changed = {c: w for c, w in loose.items() if w is not None and len(w) >= 3}  # "r" for R reads as a letter
    if not changed or len(set(changed.values())) != len(changed):
        return None
    if any(loose_name(other) in changed.values() or other.lower() in changed.values()
           for other in columns if other not in changed):
        return None  # another column already reads like that: the phrase would be ambiguous
    question, constraints = draft.question, draft.constraints
    for column, words in changed.items():
        question = _pattern(column).sub(words, question)
        constraints = _pattern(column).sub(words, constraints)
    mapping = " ".join(f"\"{words}\" is the column {column!r}." for column, words in
                       sorted(changed.items(), key=lambda item: _first_mention(item[1], question)))
    first, *rest = draft.steps
    steps = (Step(f"{mapping} {first.thought}", first.code), *rest)
    return replace(draft, question=question, constraints=constraints, steps=steps)


def _title(column: str) -> str:
    return re.sub(r"(^|[._\s])([a-z])", lambda m: m.group(1) + m.group(2).upper(), column)


def title_case_columns(info: TableInfo, frame: Any) -> tuple[TableInfo, Any]:
    """The table with each lower-case column name capitalised word by word (``rate`` -> ``Rate``, ``n_obs`` ->
    ``N_Obs``), as benchmark CSV files often name them; R's tables are mostly lower case, so without this few
    columns would have a loose wording that differs from the name. Unchanged when names would collide."""
    renamed = {c: _title(c) for c in info.columns}
    if len(set(renamed.values())) != len(renamed) or all(c == n for c, n in renamed.items()):
        return info, frame
    def cols(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(renamed[c] for c in names)
    info = replace(info, columns=cols(info.columns), continuous=cols(info.continuous),
                   categorical=cols(info.categorical), with_missing=cols(info.with_missing),
                   positive=cols(info.positive),
                   cardinality={renamed.get(c, c): n for c, n in info.cardinality.items()},
                   top_values={renamed.get(c, c): v for c, v in info.top_values.items()},
                   round_medians={renamed.get(c, c): v for c, v in info.round_medians.items()},
                   phrases={renamed.get(c, c): v for c, v in info.phrases.items()})
    return info, frame.rename(columns=renamed)
