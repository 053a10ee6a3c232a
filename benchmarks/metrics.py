"""Scoring metrics for DSBench data-modeling tasks, each with the direction in which it improves.

Every metric takes two aligned pandas objects, the reference answers and the predictions, and returns one
float. A *column* metric compares one column (a Series each); a *frame* metric compares every answer column
(a DataFrame each, same columns, same row order). Alignment of rows and the choice of columns happen in
``benchmarks.dsbench.scoring``; the functions here only compute.

The functions are written from the metrics' textbook definitions (and, where scikit-learn has one, by
calling it), so that their values agree with the official per-competition scripts that DSBench ships.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np
import pandas as pd

from value_model.metrics import spearman as rank_correlation

__all__ = [
    "Direction",
    "MetricKind",
    "Metric",
    "METRICS",
    "get_metric",
    "MetricError",
    "metric_from_line",
]


class MetricError(ValueError):
    """A submission cannot be scored by a metric (wrong values, wrong shape); the message says why."""


class Direction(str, enum.Enum):
    """Which way a metric improves."""

    HIGHER = "higher"
    LOWER = "lower"

    @property
    def higher_is_better(self) -> bool:
        return self is Direction.HIGHER


class MetricKind(str, enum.Enum):
    """What a metric compares: one named column, or every answer column at once."""

    COLUMN = "column"
    FRAME = "frame"


@dataclass(frozen=True)
class Metric:
    """A named metric: ``fn(answers, predictions) -> float`` plus its direction and kind."""

    name: str
    fn: Callable[..., float]
    direction: Direction
    kind: MetricKind = MetricKind.COLUMN
    description: str = ""

    def __call__(self, answers: pd.Series | pd.DataFrame, predictions: pd.Series | pd.DataFrame) -> float:
        try:
            value = float(self.fn(answers, predictions))
        except MetricError:
            raise
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise MetricError(f"metric {self.name}: {exc}") from None
        if math.isnan(value):
            raise MetricError(f"metric {self.name}: the score is NaN")
        return value


# ----------------------------------------------------------------------------------------- helpers


def _numeric(values: pd.Series | pd.DataFrame, what: str) -> np.ndarray:
    """Values as a float array; a non-number or missing prediction is a scoring error, not a zero."""
    try:
        array = np.asarray(pd.DataFrame(values).apply(pd.to_numeric, errors="raise"), dtype=float)
    except (ValueError, TypeError):
        raise MetricError(f"{what}: values must be numbers") from None
    if np.isnan(array).any():
        raise MetricError(f"{what}: {int(np.isnan(array).sum())} missing value(s)")
    return array if isinstance(values, pd.DataFrame) else array.ravel()


def _pair(answers: pd.Series | pd.DataFrame, predictions: pd.Series | pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    return _numeric(answers, "answers"), _numeric(predictions, "predictions")


def _labels(answers: pd.Series, predictions: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Class labels compared as the official scripts compare pandas columns: numbers as numbers, else text.

    A CSV read back gives ``1`` vs ``1.0`` or ``True`` vs ``"True"`` depending on the file; both sides are
    brought to one representation so that equal labels compare equal.
    """
    if predictions.isna().any():
        raise MetricError(f"predictions: {int(predictions.isna().sum())} missing value(s)")
    a_num = pd.to_numeric(answers, errors="coerce")
    p_num = pd.to_numeric(predictions, errors="coerce")
    if not a_num.isna().any() and not p_num.isna().any():
        return a_num.to_numpy(dtype=float), p_num.to_numpy(dtype=float)
    return (
        answers.astype(str).str.strip().str.lower().to_numpy(),
        predictions.astype(str).str.strip().str.lower().to_numpy(),
    )


# ----------------------------------------------------------------------------------------- regression


def rmse(answers, predictions) -> float:
    a, p = _pair(answers, predictions)
    return float(np.sqrt(np.mean((a - p) ** 2)))


def mse(answers, predictions) -> float:
    a, p = _pair(answers, predictions)
    return float(np.mean((a - p) ** 2))


def mae(answers, predictions) -> float:
    a, p = _pair(answers, predictions)
    return float(np.mean(np.abs(a - p)))


def median_ae(answers, predictions) -> float:
    a, p = _pair(answers, predictions)
    return float(np.median(np.abs(a - p)))


def rmsle(answers, predictions) -> float:
    """Root mean squared log error over every value (both sides must be > -1, as in scikit-learn)."""
    a, p = _pair(answers, predictions)
    if (a <= -1).any() or (p <= -1).any():
        raise MetricError("rmsle: values must be greater than -1")
    return float(np.sqrt(np.mean((np.log1p(p) - np.log1p(a)) ** 2)))


def mean_column_rmsle(answers, predictions) -> float:
    """RMSLE per column, averaged over the columns."""
    a, p = _pair(answers, predictions)
    a, p = a.reshape(len(a), -1), p.reshape(len(p), -1)
    if (a <= -1).any() or (p <= -1).any():
        raise MetricError("mean column rmsle: values must be greater than -1")
    return float(np.mean(np.sqrt(np.mean((np.log1p(p) - np.log1p(a)) ** 2, axis=0))))


def mcrmse(answers, predictions) -> float:
    """Mean column-wise RMSE."""
    a, p = _pair(answers, predictions)
    a, p = a.reshape(len(a), -1), p.reshape(len(p), -1)
    return float(np.mean(np.sqrt(np.mean((a - p) ** 2, axis=0))))


def r2(answers, predictions) -> float:
    a, p = _pair(answers, predictions)
    total = np.sum((a - a.mean()) ** 2)
    if total == 0:
        raise MetricError("r2: the answers are constant")
    return float(1.0 - np.sum((a - p) ** 2) / total)


def smape(answers, predictions) -> float:
    """Symmetric MAPE in percent (0–200), a pair of zeros counting as 0 (Kaggle's convention)."""
    a, p = _pair(answers, predictions)
    denominator = (np.abs(a) + np.abs(p)) / 2.0
    ratio = np.where(denominator == 0, 0.0, np.abs(p - a) / np.where(denominator == 0, 1.0, denominator))
    return float(100.0 * np.mean(ratio))


def pearson(answers, predictions) -> float:
    a, p = _pair(answers, predictions)
    if a.std() == 0 or p.std() == 0:
        raise MetricError("pearson: a constant column has no correlation")
    return float(np.corrcoef(a, p)[0, 1])


def spearman(answers, predictions) -> float:
    a, p = _pair(answers, predictions)
    value = rank_correlation(a.tolist(), p.tolist())
    if value is None:
        raise MetricError("spearman: a constant column has no correlation")
    return value


def mean_spearman(answers, predictions) -> float:
    """Spearman's rho per column, averaged over the columns where it is defined (Google QUEST)."""
    a, p = _pair(answers, predictions)
    a, p = a.reshape(len(a), -1), p.reshape(len(p), -1)
    values = [rank_correlation(a[:, j].tolist(), p[:, j].tolist()) for j in range(a.shape[1])]
    defined = [v for v in values if v is not None]
    if not defined:
        raise MetricError("mean spearman: no column has a defined correlation")
    return float(np.mean(defined))


# ----------------------------------------------------------------------------------------- classification


def accuracy(answers, predictions) -> float:
    a, p = _labels(pd.Series(answers), pd.Series(predictions))
    return float(np.mean(a == p))


def _f1(answers, predictions, average: str) -> float:
    from sklearn.metrics import f1_score

    a, p = _labels(pd.Series(answers), pd.Series(predictions))
    return float(f1_score(a, p, average=average))


def roc_auc(answers, predictions) -> float:
    from sklearn.metrics import roc_auc_score

    a, p = _pair(answers, predictions)
    if len(np.unique(a)) < 2:
        raise MetricError("roc auc: the answers hold one class only")
    return float(roc_auc_score(a, p))


def mean_column_auc(answers, predictions) -> float:
    """ROC-AUC per target column (each a binary label with a predicted probability), averaged."""
    from sklearn.metrics import roc_auc_score

    a, p = _pair(answers, predictions)
    a, p = a.reshape(len(a), -1), p.reshape(len(p), -1)
    scores = [roc_auc_score(a[:, j], p[:, j]) for j in range(a.shape[1]) if len(np.unique(a[:, j])) > 1]
    if not scores:
        raise MetricError("mean column auc: no column holds both classes")
    return float(np.mean(scores))


def normalized_gini(answers, predictions) -> float:
    """Gini of the predictions' ordering divided by the Gini of the perfect ordering (Porto Seguro)."""
    a, p = _pair(answers, predictions)

    def gini(actual: np.ndarray, score: np.ndarray) -> float:
        order = np.lexsort((np.arange(len(actual)), -score))  # by score descending, ties in input order
        ranked = actual[order]
        total = ranked.sum()
        if total == 0:
            raise MetricError("normalized gini: the answers sum to zero")
        cumulative = np.cumsum(ranked) / total
        return float(cumulative.sum() - (len(actual) + 1) / 2.0) / len(actual)

    return gini(a, p) / gini(a, a)


def log_loss(answers, predictions) -> float:
    """Binary log-loss: answers are 0/1, predictions the probability of class 1 (clipped like sklearn)."""
    a, p = _pair(answers, predictions)
    p = np.clip(p, 1e-15, 1 - 1e-15)
    return float(-np.mean(a * np.log(p) + (1 - a) * np.log(1 - p)))


def multiclass_log_loss(answers, predictions) -> float:
    """Log-loss over one-hot answer columns and per-class probability columns (rows renormalised)."""
    a, p = _pair(answers, predictions)
    a, p = a.reshape(len(a), -1), p.reshape(len(p), -1)
    if (p < 0).any():
        raise MetricError("log loss: negative probabilities")
    p = np.clip(p, 1e-15, 1 - 1e-15)
    p = p / p.sum(axis=1, keepdims=True)
    return float(-np.mean(np.sum(a * np.log(p), axis=1)))


def quadratic_weighted_kappa(answers, predictions) -> float:
    from sklearn.metrics import cohen_kappa_score

    a, p = _pair(answers, predictions)
    if not (np.allclose(a, np.round(a)) and np.allclose(p, np.round(p))):
        raise MetricError("quadratic weighted kappa: ratings must be integers")
    return float(cohen_kappa_score(np.round(a).astype(int), np.round(p).astype(int), weights="quadratic"))


def _words(text: object) -> set[str]:
    return set(str(text).lower().split()) if not (isinstance(text, float) and math.isnan(text)) else set()


def word_jaccard(answers, predictions) -> float:
    """Mean word-level Jaccard similarity between answer and predicted strings (two empties count 1)."""
    scores = []
    for truth, guess in zip(pd.Series(answers).tolist(), pd.Series(predictions).tolist()):
        a, b = _words(truth), _words(guess)
        union = a | b
        scores.append(len(a & b) / len(union) if union else 1.0)
    if not scores:
        raise MetricError("jaccard: nothing to score")
    return float(np.mean(scores))


def map_at_3(answers, predictions) -> float:
    """Mean average precision at 3: each prediction is up to 3 space-separated labels, best first."""
    scores = []
    for truth, guess in zip(pd.Series(answers).tolist(), pd.Series(predictions).tolist()):
        ranked = str(guess).split()[:3]
        target = str(truth).strip()
        scores.append(next((1.0 / (k + 1) for k, label in enumerate(ranked) if label == target), 0.0))
    if not scores:
        raise MetricError("map@3: nothing to score")
    return float(np.mean(scores))


# ----------------------------------------------------------------------------------------- registry


def _m(name: str, fn: Callable[..., float], direction: Direction, kind: MetricKind = MetricKind.COLUMN,
       doc: str = "") -> Metric:
    return Metric(name=name, fn=fn, direction=direction, kind=kind, description=doc or (fn.__doc__ or "").strip())


H, L, C, F = Direction.HIGHER, Direction.LOWER, MetricKind.COLUMN, MetricKind.FRAME

#: every metric the DSBench tasks use, by registry name
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        _m("accuracy", accuracy, H, C, "share of rows whose predicted label equals the answer"),
        _m("roc_auc", roc_auc, H, C, "area under the ROC curve of a binary label"),
        _m("mean_column_auc", mean_column_auc, H, F),
        _m("normalized_gini", normalized_gini, H, C),
        _m("f1", partial(_f1, average="binary"), H, C, "F1 of the positive class"),
        _m("f1_macro", partial(_f1, average="macro"), H, C, "F1 averaged over classes"),
        _m("f1_micro", partial(_f1, average="micro"), H, C,
           "F1 over all decisions (equals accuracy for single labels)"),
        _m("log_loss", log_loss, L, C),
        _m("multiclass_log_loss", multiclass_log_loss, L, F),
        _m("quadratic_weighted_kappa", quadratic_weighted_kappa, H, C, "Cohen's kappa with quadratic weights"),
        _m("word_jaccard", word_jaccard, H, C),
        _m("map_at_3", map_at_3, H, C),
        _m("rmse", rmse, L, C, "root mean squared error"),
        _m("mse", mse, L, C, "mean squared error"),
        _m("mae", mae, L, C, "mean absolute error"),
        _m("median_ae", median_ae, L, C, "median absolute error"),
        _m("rmsle", rmsle, L, C),
        _m("frame_rmsle", rmsle, L, F, "RMSLE over every value of every answer column"),
        _m("frame_mae", mae, L, F, "mean absolute error over every value of every answer column"),
        _m("mean_column_rmsle", mean_column_rmsle, L, F),
        _m("mcrmse", mcrmse, L, F),
        _m("r2", r2, H, C, "coefficient of determination"),
        _m("smape", smape, L, C),
        _m("pearson", pearson, H, C, "Pearson correlation"),
        _m("spearman", spearman, H, C, "Spearman rank correlation"),
        _m("mean_spearman", mean_spearman, H, F),
    )
}


def get_metric(name: str) -> Metric:
    """The registered metric ``name``; the error lists the known names."""
    try:
        return METRICS[name]
    except KeyError:
        raise MetricError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))}") from None


# Recognising a metric from an official scoring line: first matching pattern wins (order matters:
# ``mean_squared_log_error`` before ``mean_squared_error``, ``sqrt(...)`` before the bare error).
LINE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), name)
    for pattern, name in (
        (r"auc_scores|roc_auc_score\(answers\['EC1'\]", "mean_column_auc"),
        (r"roc_auc_score", "roc_auc"),
        (r"normalized_gini", "normalized_gini"),
        (r"f1_score\(.*average='macro'", "f1_macro"),
        (r"f1_score\(.*average='micro'", "f1_micro"),
        (r"f1_score", "f1"),
        (r"log_loss\(actual_values", "multiclass_log_loss"),
        (r"log_loss", "log_loss"),
        (r"cohen_kappa_score\(.*quadratic|quadratic_weighted_kappa", "quadratic_weighted_kappa"),
        (r"jaccard", "word_jaccard"),
        (r"mpa_at_3|map_at_3|mapk", "map_at_3"),
        (r"mean_column_wise_rmsle|average_rmsle", "mean_column_rmsle"),
        (r"rmsle\(predictions, answers\)", "frame_rmsle"),
        (r"sqrt\(mean_squared_log_error|rmsle", "rmsle"),
        (r"mcrmse", "mcrmse"),
        (r"mean_spearmanr", "mean_spearman"),
        (r"median_absolute_error", "median_ae"),
        (r"np\.mean\(np\.abs\(submission_values - actual_values\)\)", "frame_mae"),
        (r"mean_absolute_error", "mae"),
        (r"sqrt\(mean_squared_error|calculate_rmse|\brmse\b", "rmse"),
        (r"mean_squared_error", "mse"),
        (r"r2_score", "r2"),
        (r"smape", "smape"),
        (r"accuracy_score|== answers\[args\.value\]\)\.mean\(\)", "accuracy"),
    )
)


def metric_from_line(line: str | None) -> str | None:
    """The registry name of the metric an official scoring line computes (None when not recognised)."""
    if not line:
        return None
    return next((name for pattern, name in LINE_PATTERNS if pattern.search(line)), None)
