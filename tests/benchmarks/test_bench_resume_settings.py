"""A resumed benchmark run keeps its first ``run.json`` and says which settings changed, by name and value."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from benchmarks.runner import write_run_info


def _info(**config) -> dict:
    return {"benchmark": "dabench", "llm": "default", "data": Path("STB"), "started": "T0",
            "config": {"iterations": 8, "expansions": 2, "max_trees_in_flight": 12, **config}}


def test_a_resume_names_each_changed_setting_with_its_old_and_new_value(tmp_path, caplog):
    write_run_info(tmp_path, _info())
    with caplog.at_level(logging.WARNING, logger="benchmarks.runner"):
        write_run_info(tmp_path, {**_info(iterations=6, max_trees_in_flight=10), "started": "T1"})
    warning = " ".join(r.getMessage() for r in caplog.records)
    assert "config.iterations: 8 -> 6" in warning
    assert "config.max_trees_in_flight: 12 -> 10" in warning
    assert "expansions" not in warning and "started" not in warning
    stored = json.loads((tmp_path / "run.json").read_text())
    assert stored["config"]["iterations"] == 8 and stored["started"] == "T0" and len(stored["resumed"]) == 1


def test_a_resume_with_the_same_settings_warns_nothing(tmp_path, caplog):
    write_run_info(tmp_path, _info())
    with caplog.at_level(logging.WARNING, logger="benchmarks.runner"):
        write_run_info(tmp_path, {**_info(), "started": "T1"})  # data is a Path now and a string in run.json
    assert not caplog.records
