"""The value model's held-out metrics: Spearman's rho is scipy's, and undefined (None) on a constant side."""

import pytest
from scipy import stats

from value_model.metrics import mse, spearman


def test_spearman_ranks_with_ties_as_scipy_does() -> None:
    predictions, targets = [0.1, 0.4, 0.4, -0.2, 0.9], [0.0, 1.0, 0.5, -1.0, 1.0]
    assert spearman(predictions, targets) == pytest.approx(stats.spearmanr(predictions, targets).statistic)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_a_constant_side_has_no_rank_correlation() -> None:
    assert spearman([0.5, 0.5, 0.5], [0.0, 1.0, -1.0]) is None
    assert spearman([0.1, 0.2, 0.3], [1.0, 1.0, 1.0]) is None


def test_too_short_or_unequal_inputs_are_refused() -> None:
    with pytest.raises(ValueError):
        spearman([1.0], [1.0])
    with pytest.raises(ValueError):
        mse([1.0, 2.0], [1.0])
