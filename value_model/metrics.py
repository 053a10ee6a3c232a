"""Held-out metrics of a value model: mean squared error and Spearman rank correlation."""

from __future__ import annotations

from collections.abc import Sequence

import scipy.stats

__all__ = ["mse", "spearman"]


def mse(predictions: Sequence[float], targets: Sequence[float]) -> float:
    if len(predictions) != len(targets) or not predictions:
        raise ValueError("mse: need two non-empty sequences of equal length")
    return sum((p - t) ** 2 for p, t in zip(predictions, targets)) / len(predictions)


def spearman(predictions: Sequence[float], targets: Sequence[float]) -> float | None:
    """Spearman's rho (scipy's, ties at their average rank); None when either side is constant, where a rank
    correlation is not defined (an untrained head that predicts one value has no ranking to score)."""
    if len(predictions) != len(targets) or len(predictions) < 2:
        raise ValueError("spearman: need two sequences of equal length >= 2")
    if len(set(predictions)) < 2 or len(set(targets)) < 2:
        return None
    return float(scipy.stats.spearmanr(predictions, targets).statistic)
