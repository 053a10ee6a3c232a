"""Metric functions against hand-computed values and scikit-learn's reference implementations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from benchmarks.metrics import METRICS, Direction, MetricError, get_metric, metric_from_line

RNG = np.random.default_rng(7)
Y_BIN = pd.Series(RNG.integers(0, 2, 200))
P_BIN = pd.Series(np.clip(Y_BIN * 0.3 + RNG.random(200) * 0.7, 0.01, 0.99))
Y_REG = pd.Series(RNG.random(200) * 10)
P_REG = Y_REG + pd.Series(RNG.normal(0, 1, 200)).abs()


def m(name, a, p):
    return get_metric(name)(a, p)


def test_regression_metrics_match_sklearn():
    assert m("rmse", Y_REG, P_REG) == pytest.approx(math.sqrt(skm.mean_squared_error(Y_REG, P_REG)))
    assert m("mse", Y_REG, P_REG) == pytest.approx(skm.mean_squared_error(Y_REG, P_REG))
    assert m("mae", Y_REG, P_REG) == pytest.approx(skm.mean_absolute_error(Y_REG, P_REG))
    assert m("median_ae", Y_REG, P_REG) == pytest.approx(skm.median_absolute_error(Y_REG, P_REG))
    assert m("rmsle", Y_REG, P_REG) == pytest.approx(math.sqrt(skm.mean_squared_log_error(Y_REG, P_REG)))
    assert m("r2", Y_REG, P_REG) == pytest.approx(skm.r2_score(Y_REG, P_REG))


def test_hand_computed_values():
    a, p = pd.Series([1.0, 2.0, 3.0]), pd.Series([1.0, 2.0, 5.0])
    assert m("rmse", a, p) == pytest.approx(math.sqrt(4 / 3))
    assert m("mae", a, p) == pytest.approx(2 / 3)
    # SMAPE: |5-3| / ((3+5)/2) = 0.5 → mean 1/6 → 16.67 %; a (0, 0) pair counts 0
    assert m("smape", a, p) == pytest.approx(100 / 6)
    assert m("smape", pd.Series([0.0, 2.0]), pd.Series([0.0, 2.0])) == 0.0
    assert m("accuracy", pd.Series(["a", "b", "c", "d"]), pd.Series(["a", "b", "x", "d"])) == 0.75
    assert m("accuracy", pd.Series([True, False]), pd.Series(["True", "False"])) == 1.0
    assert m("accuracy", pd.Series([1, 0]), pd.Series([1.0, 0.0])) == 1.0
    assert m("map_at_3", pd.Series(["a", "b", "c"]), pd.Series(["a b c", "a b c", "x y z"])) == \
        pytest.approx((1 + 0.5 + 0) / 3)
    assert m("word_jaccard", pd.Series(["the cat sat", "hi"]), pd.Series(["the cat", "hi"])) == \
        pytest.approx((2 / 3 + 1) / 2)
    frame_a = pd.DataFrame({"x": [1.0, 2.0], "y": [0.0, 0.0]})
    frame_p = pd.DataFrame({"x": [1.0, 4.0], "y": [1.0, 1.0]})
    assert m("mcrmse", frame_a, frame_p) == pytest.approx((math.sqrt(2) + 1) / 2)
    assert m("frame_mae", frame_a, frame_p) == pytest.approx((0 + 2 + 1 + 1) / 4)


def test_classification_metrics_match_sklearn():
    assert m("roc_auc", Y_BIN, P_BIN) == pytest.approx(skm.roc_auc_score(Y_BIN, P_BIN))
    assert m("log_loss", Y_BIN, P_BIN) == pytest.approx(skm.log_loss(Y_BIN, P_BIN))
    labels = (P_BIN > 0.5).astype(int)
    assert m("f1", Y_BIN, labels) == pytest.approx(skm.f1_score(Y_BIN, labels))
    multi_a, multi_p = pd.Series(RNG.integers(0, 4, 100)), pd.Series(RNG.integers(0, 4, 100))
    assert m("f1_macro", multi_a, multi_p) == pytest.approx(skm.f1_score(multi_a, multi_p, average="macro"))
    assert m("f1_micro", multi_a, multi_p) == pytest.approx(skm.f1_score(multi_a, multi_p, average="micro"))
    assert m("quadratic_weighted_kappa", multi_a, multi_p) == pytest.approx(
        skm.cohen_kappa_score(multi_a, multi_p, weights="quadratic")
    )


def test_multiclass_log_loss_and_column_auc_match_sklearn():
    classes = RNG.integers(0, 3, 150)
    onehot = pd.DataFrame(np.eye(3)[classes], columns=["a", "b", "c"])
    probs = RNG.random((150, 3)) + np.eye(3)[classes]
    probs = probs / probs.sum(axis=1, keepdims=True)
    frame = pd.DataFrame(probs, columns=["a", "b", "c"])
    assert m("multiclass_log_loss", onehot, frame) == pytest.approx(skm.log_loss(classes, probs))
    expected = np.mean([skm.roc_auc_score(onehot[c], frame[c]) for c in "abc"])
    assert m("mean_column_auc", onehot, frame) == pytest.approx(expected)


def test_correlations_match_scipy():
    from scipy import stats

    assert m("pearson", Y_REG, P_REG) == pytest.approx(stats.pearsonr(Y_REG, P_REG)[0])
    assert m("spearman", Y_REG, P_REG) == pytest.approx(stats.spearmanr(Y_REG, P_REG)[0])
    frame_a = pd.DataFrame({"u": Y_REG, "v": P_REG})
    frame_p = pd.DataFrame({"u": P_REG, "v": Y_REG ** 2})
    expected = (stats.spearmanr(Y_REG, P_REG)[0] + stats.spearmanr(P_REG, Y_REG ** 2)[0]) / 2
    assert m("mean_spearman", frame_a, frame_p) == pytest.approx(expected)


def test_spearman_of_a_constant_column_is_an_error_and_mean_spearman_skips_it():
    from scipy import stats

    constant = pd.Series([2.0] * len(Y_REG))
    with pytest.raises(MetricError, match="constant"):
        m("spearman", Y_REG, constant)
    frame_a = pd.DataFrame({"u": Y_REG, "v": Y_REG})
    frame_p = pd.DataFrame({"u": P_REG, "v": constant})
    assert m("mean_spearman", frame_a, frame_p) == pytest.approx(stats.spearmanr(Y_REG, P_REG)[0])


def test_normalized_gini_perfect_and_reference():
    y = pd.Series([1, 0, 0, 1, 0, 0, 1, 0])
    assert m("normalized_gini", y, y.astype(float)) == pytest.approx(1.0)
    assert m("normalized_gini", y, pd.Series(1.0 - y)) == pytest.approx(-1.0)
    # for binary targets the normalised Gini equals 2·AUC − 1 (no ties in the scores)
    assert m("normalized_gini", Y_BIN, P_BIN) == pytest.approx(2 * skm.roc_auc_score(Y_BIN, P_BIN) - 1, abs=1e-9)


def test_bad_predictions_raise_metric_error():
    with pytest.raises(MetricError, match="numbers"):
        m("rmse", pd.Series([1.0, 2.0]), pd.Series(["a", "b"]))
    with pytest.raises(MetricError, match="missing"):
        m("rmse", pd.Series([1.0, 2.0]), pd.Series([1.0, None]))
    with pytest.raises(MetricError, match="greater than -1"):
        m("rmsle", pd.Series([1.0, 2.0]), pd.Series([1.0, -3.0]))
    with pytest.raises(MetricError, match="unknown metric"):
        get_metric("nope")


def test_directions():
    assert METRICS["rmse"].direction is Direction.LOWER
    assert METRICS["roc_auc"].direction is Direction.HIGHER
    assert metric_from_line("performance = np.sqrt(mean_squared_log_error(a, b))") == "rmsle"
    assert metric_from_line("performance = np.sqrt(mean_squared_error(a, b))") == "rmse"
    assert metric_from_line("performance = mean_squared_error(a, b)") == "mse"
    assert metric_from_line(None) is None
