"""The value model and the sandbox are built from settings the same way for every runner, and a tree that
comes back from a Ray worker becomes the result a local run would have made."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
from viewer_trees import decided, wide_tree

from search.config import Mode, SearchConfig
from search.loaders import LoadError, load_value, sandbox_config, value_model_path
from search.ray_actors import TreeOutcome
from search.result import SearchStats


def test_no_value_model_is_none_and_a_missing_folder_names_the_option(tmp_path: Path) -> None:
    assert load_value(None) is None
    with pytest.raises(LoadError, match=r"--value-model .*nope: folder not found"):
        load_value(tmp_path / "nope")


def test_value_model_none_is_no_model_and_default_is_the_shipped_folder(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    import search.loaders as loaders

    assert value_model_path("none") is None and value_model_path("None") is None and load_value("none") is None
    assert value_model_path(str(tmp_path)) == tmp_path
    monkeypatch.setattr(loaders, "DEFAULT_VALUE_MODEL", tmp_path / "shipped")
    with pytest.raises(LoadError, match="--value-model default: no value model ships in .*shipped"):
        value_model_path("default")
    (tmp_path / "shipped").mkdir()
    (tmp_path / "shipped" / "value_config.json").write_text("{}")
    assert value_model_path("default") == tmp_path / "shipped"


def test_a_value_model_without_the_train_extra_says_how_to_get_it(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "value_model", types.ModuleType("value_model"))
    with pytest.raises(LoadError, match="'train' extra"):
        load_value(tmp_path)


def test_the_value_model_is_loaded_with_the_given_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    class Scorer:
        @classmethod
        def load(cls, path, **options):
            calls.append((path, options))
            return cls()

    module = types.ModuleType("value_model")
    module.ValueScorer = Scorer
    monkeypatch.setitem(sys.modules, "value_model", module)
    assert isinstance(load_value(tmp_path, device="cpu", batch_size=8), Scorer)
    assert calls == [(tmp_path, {"device": "cpu", "batch_size": 8})]


def test_the_sandbox_runs_cells_with_the_searchs_cell_timeout() -> None:
    config = SearchConfig(mode=Mode.INFER).replace(cell_timeout=42.0)
    assert sandbox_config(config).timeout_s == 42.0
    assert sandbox_config(config, nice=5).nice == 5
    assert sandbox_config(config, timeout_s=7.0).timeout_s == 7.0  # an explicit option wins


def test_a_ray_outcome_becomes_the_result_with_the_workers_own_counters() -> None:
    local = decided(wide_tree(30))
    stats = SearchStats(iterations=17, nodes=len(local.tree.nodes), model_calls=9, wall_seconds=2.5)
    outcome = TreeOutcome(task_id=local.task_id, attempt=1, worker="w0", pid=1, tree=local.tree, nodes=stats.nodes,
                          seconds=2.5, best_reward=None, answer=local.answer, correct=local.correct, error=None,
                          stats=stats)
    result = outcome.to_result(local.config, value_given=False)
    assert result.answer == local.answer and result.vote_table == local.vote_table
    assert result.stats.iterations == 17 and result.stats.model_calls == 9  # what the worker's driver counted
    assert any("w0" in note for note in result.notes)
