"""DSBench: every task maps to a registered metric; submissions score; RPG with the official g and b."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks.dsbench import DsbenchSpec, load_specs, normalized_performance, rpg, score_submission
from benchmarks.dsbench.tasks import OVERRIDES
from benchmarks.metrics import METRICS, MetricError


def rmse_spec(name="toy-regression", baseline=4.0):
    return DsbenchSpec(name=name, metric="rmse", value_col="y", gt=0.0, baseline=baseline, higher_is_better=False)


def test_every_official_task_has_a_registered_metric_with_its_direction(bench_shared):
    specs = load_specs(bench_shared / "dsbench" / "tasks.json")
    assert len(specs) == 74
    for spec in specs:
        assert spec.metric in METRICS, spec.name
        assert METRICS[spec.metric].direction.higher_is_better == spec.higher_is_better, spec.name
    used = {s.metric for s in specs}
    assert {"roc_auc", "rmse", "rmsle", "accuracy", "f1", "log_loss", "quadratic_weighted_kappa",
            "normalized_gini", "r2", "pearson", "mean_spearman", "word_jaccard", "map_at_3", "mcrmse",
            "smape", "mae"} <= used
    assert set(OVERRIDES) <= {s.name for s in specs}


def test_correct_submission_scores_perfectly(tmp_path, make_task):
    paths = make_task(tmp_path)
    good = paths["test"].sample(frac=1.0, random_state=1)  # shuffled rows: aligned by id
    score = score_submission(rmse_spec(), paths["answers"], good.to_csv(index=False).encode())
    assert score.ok and score.value == pytest.approx(0.0)
    assert score.normalized == pytest.approx(1.0)


def test_imperfect_submission_expected_rmse_and_rpg(tmp_path, make_task):
    paths = make_task(tmp_path)
    off = paths["test"].assign(y=paths["test"]["y"] + 1.0)
    score = score_submission(rmse_spec(), paths["answers"], off)
    assert score.value == pytest.approx(1.0)
    assert score.normalized == pytest.approx((1.0 - 4.0) / (0.0 - 4.0))  # 0.75
    worse = paths["test"].assign(y=paths["test"]["y"] + 10.0)
    assert score_submission(rmse_spec(), paths["answers"], worse).normalized == 0.0  # below baseline → 0


def test_bad_submissions_are_failures_with_reasons(tmp_path, make_task):
    paths = make_task(tmp_path)
    spec = rmse_spec()
    assert score_submission(spec, paths["answers"], None).error == "no submission file"
    missing = score_submission(spec, paths["answers"], paths["test"].iloc[:3])
    assert not missing.ok and "missing" in missing.error
    text = score_submission(spec, paths["answers"], paths["test"].assign(y="high"))
    assert not text.ok and "numbers" in text.error
    garbage = score_submission(spec, paths["answers"], b"\x00\x01not,a\ncsv")
    assert not garbage.ok
    with pytest.raises(MetricError, match="not found"):
        score_submission(spec, tmp_path / "nope.csv", paths["test"])


def test_value_col_fallback_and_frame_metric(tmp_path):
    answers = pd.DataFrame({"ForecastId": [1, 2, 3], "ConfirmedCases": [1.0, 2.0, 3.0], "Fatalities": [0.0, 1.0, 0.0]})
    spec = DsbenchSpec("covid", "frame_rmsle", "count", 0.0, 1.5, False)
    assert score_submission(spec, answers, answers.copy()).value == pytest.approx(0.0)
    spec2 = DsbenchSpec("s3e16", "mae", "yield", 0.0, 2.3, False)  # value_col copied from another task
    a2 = pd.DataFrame({"id": [1, 2], "Age": [3.0, 5.0]})
    assert score_submission(spec2, a2, a2.assign(Age=[4.0, 5.0])).value == pytest.approx(0.5)


def test_rpg_counts_missing_tasks_as_zero():
    specs = [
        DsbenchSpec("a", "roc_auc", "t", 1.0, 0.5, True),
        DsbenchSpec("b", "rmse", "t", 0.0, 4.0, False),
        DsbenchSpec("c", "rmse", "t", 0.0, 4.0, False),
    ]
    values = {"a": 0.75, "b": 1.0}  # c has no result
    assert normalized_performance(0.75, specs[0]) == pytest.approx(0.5)
    assert rpg(values, specs) == pytest.approx((0.5 + 0.75 + 0.0) / 3)


def synthetic_answers(spec: DsbenchSpec, rows: int = 60) -> pd.DataFrame:
    """A small answers file of the right kind for the spec's metric (first column: id)."""
    import zlib

    import numpy as np

    rng = np.random.default_rng(zlib.crc32(spec.name.encode()))
    ids = np.arange(1000, 1000 + rows)
    metric = METRICS[spec.metric]
    if metric.kind.value == "frame":
        if spec.metric in ("mean_column_auc", "multiclass_log_loss"):
            classes = rng.integers(0, 3, rows)
            classes[:3] = [0, 1, 2]
            onehot = np.eye(3)[classes]
            return pd.DataFrame({"id": ids, "a": onehot[:, 0], "b": onehot[:, 1], "c": onehot[:, 2]})
        return pd.DataFrame({"id": ids, "a": rng.random(rows) * 5, "b": rng.random(rows) * 3, "c": rng.random(rows)})
    col = spec.value_col or "target"
    if spec.metric in ("roc_auc", "normalized_gini", "f1", "log_loss"):
        values = rng.integers(0, 2, rows)
        values[:2] = [0, 1]
    elif spec.metric in ("accuracy", "f1_macro", "f1_micro", "quadratic_weighted_kappa"):
        values = rng.integers(0, 4, rows)
    elif spec.metric in ("word_jaccard",):
        values = [f"word{i} other{i % 3}" for i in range(rows)]
    elif spec.metric == "map_at_3":
        values = [f"class_{i % 5}" for i in range(rows)]
    else:
        values = rng.random(rows) * 10 + 0.5
    return pd.DataFrame({"id": ids, col: values})


def test_perfect_submission_reaches_gt_on_every_official_task(bench_shared):
    """Scoring the answers against themselves gives each task's official g (so RPG's scale is right)."""
    for spec in load_specs(bench_shared / "dsbench" / "tasks.json"):
        answers = synthetic_answers(spec)
        score = score_submission(spec, answers, answers.sample(frac=1.0, random_state=0))
        assert score.ok, (spec.name, score.error)
        assert score.value == pytest.approx(spec.gt, abs=1e-6), spec.name
        assert score.normalized == pytest.approx(1.0, abs=1e-6), spec.name


def test_simplification_is_batched_and_cached(tmp_path):
    from benchmarks.dsbench.simplify import simplify_descriptions
    from jupiter.llm import ReplayPolicy

    policy = ReplayPolicy(rules=[
        {"match": "alpha",
         "replies": ["Predict the alpha target from train.csv and write id,target to submission.csv."]},
        {"match": "beta", "replies": ["too short"]},
    ])
    texts = {"a": "Competition alpha: prizes, rules, and a target.", "b": "Competition beta."}
    first = simplify_descriptions(texts, policy, tmp_path, model_key="m1")
    assert first["a"].startswith("Predict the alpha") and first["b"] == texts["b"]  # unusable → original text
    assert policy.stats().calls == 1  # one batched call for both tasks
    again = simplify_descriptions(texts, policy, tmp_path, model_key="m1")
    assert again["a"] == first["a"] and policy.stats().calls == 2  # only the uncached task asked again
    assert len(list(tmp_path.glob("*.json"))) == 1
    simplify_descriptions({"a": texts["a"]}, policy, tmp_path, model_key="m2")  # another model: its own entry
    assert len(list(tmp_path.glob("*.json"))) == 2
