"""Scoring one DSBench submission against its answers, and the Relative Performance Gap over tasks.

A submission *succeeds* when the task's metric produces a number from it. Failures (unreadable CSV, missing
rows or columns, non-numeric predictions) are recorded with their reason and count 0 in RPG, as in the paper.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from benchmarks.dsbench.tasks import DsbenchSpec
from benchmarks.metrics import MetricError, MetricKind

__all__ = ["SubmissionScore", "score_submission", "normalized_performance", "rpg", "read_csv"]


@dataclass(frozen=True)
class SubmissionScore:
    """The outcome of scoring one submission: a value, or the reason there is none."""

    task: str
    metric: str
    value: float | None
    error: str | None = None
    normalized: float = 0.0  # max(0, (p - b) / (g - b)); 0 without a value

    @property
    def ok(self) -> bool:
        return self.value is not None

    def to_dict(self) -> dict[str, object]:
        return {"task": self.task, "metric": self.metric, "value": self.value, "error": self.error,
                "normalized": self.normalized}


def read_csv(source: str | Path | bytes | pd.DataFrame, what: str) -> pd.DataFrame:
    """A CSV from a path, raw bytes (a workspace file) or an already-read frame."""
    if isinstance(source, pd.DataFrame):
        return source
    try:
        if isinstance(source, (bytes, bytearray)):
            return pd.read_csv(io.BytesIO(source))
        return pd.read_csv(Path(source))
    except FileNotFoundError:
        raise MetricError(f"{what}: file {source} not found") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise MetricError(f"{what}: not a readable CSV ({reason})") from None


def _align(answers: pd.DataFrame, submission: pd.DataFrame) -> pd.DataFrame:
    """The submission's rows in the answers' order: by the id column (answers' first) when both have it."""
    key = answers.columns[0]
    if key in submission.columns and answers[key].is_unique:
        if not submission[key].is_unique:
            raise MetricError(f"submission: id column {key!r} has repeated values")
        indexed = submission.set_index(submission[key].astype(str))
        wanted = answers[key].astype(str)
        missing = wanted[~wanted.isin(indexed.index)]
        if len(missing):
            raise MetricError(f"submission: {len(missing)} of {len(answers)} ids in {key!r} missing "
                              f"(e.g. {missing.iloc[0]})")
        return indexed.loc[wanted.to_numpy()].reset_index(drop=True)
    if len(submission) != len(answers):
        raise MetricError(f"submission: {len(submission)} rows, the answers have {len(answers)}")
    return submission.reset_index(drop=True)


def _column(spec: DsbenchSpec, answers: pd.DataFrame, submission: pd.DataFrame) -> tuple[str, str]:
    """(answer column, submission column) scored by a column metric.

    The metadata's ``value_col`` when both files have it; else the one non-id column they share (some
    ``value_col`` entries are copied from another task); else the only non-id column of each file.
    """
    if spec.value_col in answers.columns and spec.value_col in submission.columns:
        return spec.value_col, spec.value_col
    key = answers.columns[0]
    shared = [c for c in answers.columns if c != key and c in submission.columns]
    if len(shared) == 1:
        return shared[0], shared[0]
    a_cols = [c for c in answers.columns if c != key]
    s_cols = [c for c in submission.columns if c != key]
    if len(a_cols) == 1 and len(s_cols) == 1:
        return a_cols[0], s_cols[0]
    raise MetricError(
        f"submission: cannot tell which column to score (value column {spec.value_col!r}; answer columns "
        f"{a_cols}, submission columns {s_cols})"
    )


def normalized_performance(value: float | None, spec: DsbenchSpec) -> float:
    """``max(0, (p - b) / (g - b))`` with the official g and b; 0 without a value."""
    if value is None or math.isnan(value):
        return 0.0
    gap = spec.gt - spec.baseline
    if gap == 0:
        return 0.0
    return max(0.0, (value - spec.baseline) / gap)


def score_submission(
    spec: DsbenchSpec,
    answers: str | Path | bytes | pd.DataFrame,
    submission: str | Path | bytes | pd.DataFrame | None,
) -> SubmissionScore:
    """Score a submission (path, bytes or frame; None = no submission written) against the answers.

    Never raises for a bad submission: the reason goes into ``error``. A bad *answers* file raises
    MetricError (that is a broken benchmark copy, not the model's fault).
    """
    metric = spec.scorer
    truth = read_csv(answers, f"answers of {spec.name}")
    if submission is None:
        return SubmissionScore(spec.name, spec.metric, None, "no submission file")
    try:
        predicted = _align(truth, read_csv(submission, "submission"))
        if metric.kind is MetricKind.FRAME:
            columns = [c for c in truth.columns[1:]]
            absent = [c for c in columns if c not in predicted.columns]
            if absent:
                raise MetricError(f"submission: missing column(s) {absent}")
            value = metric(truth[columns], predicted[columns])
        else:
            a_col, s_col = _column(spec, truth, predicted)
            value = metric(truth[a_col], predicted[s_col])
    except MetricError as exc:
        return SubmissionScore(spec.name, spec.metric, None, str(exc))
    return SubmissionScore(spec.name, spec.metric, value, None, normalized_performance(value, spec))


def rpg(values: Mapping[str, float | None], specs: Iterable[DsbenchSpec]) -> float:
    """Relative Performance Gap: mean over ``specs`` of the normalised performance; absent tasks count 0."""
    specs = list(specs)
    if not specs:
        return 0.0
    return sum(normalized_performance(values.get(s.name), s) for s in specs) / len(specs)
