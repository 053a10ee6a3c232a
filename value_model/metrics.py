"""Held-out metrics of a value model: mean squared error and Spearman rank correlation."""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["mse", "spearman"]


def mse(predictions: Sequence[float], targets: Sequence[float]) -> float:
    if len(predictions) != len(targets) or not predictions:
        raise ValueError("mse: need two non-empty sequences of equal length")
    return sum((p - t) ** 2 for p, t in zip(predictions, targets)) / len(predictions)


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):  # ties share their average rank
            ranks[order[k]] = (i + j) / 2.0
        i = j + 1
    return ranks


def spearman(predictions: Sequence[float], targets: Sequence[float]) -> float:
    """Spearman's rho (Pearson correlation of average ranks); 0.0 when either side is constant."""
    if len(predictions) != len(targets) or len(predictions) < 2:
        raise ValueError("spearman: need two sequences of equal length >= 2")
    a, b = _ranks(predictions), _ranks(targets)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    if va == 0 or vb == 0:
        return 0.0
    return cov / math.sqrt(va * vb)
