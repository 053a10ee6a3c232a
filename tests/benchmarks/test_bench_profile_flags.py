"""`jupiter bench` and `jupiter solve` resolve the paper profile, take the search flags, and print the config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from jupiter.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "jupiter" / "examples" / "titanic_mean_fare.json"


def _config(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_bench_defaults_to_the_paper_profile(capsys, bench_shared):
    data = str(bench_shared / "dabench")
    record = _config(capsys, "bench", "dabench", "--data", data, "--print-config")
    config = record["config"]
    assert record["profile"] == "paper"
    assert (config["c_puct"], config["decision"], config["iterations"], config["expansions"]) == (0.0, "vote", 40, 3)
    assert record["profile_settings"]["c_puct"]["source"] == "paper"
    collect = _config(capsys, "bench", "dabench", "--data", data, "--mode", "collect", "--print-config")["config"]
    assert (collect["c_puct"], collect["temperature"], collect["top_p"]) == (1.25, 1.0, 0.95)


def test_bench_search_flags_reach_the_config(capsys, bench_shared):
    record = _config(capsys, "bench", "dabench", "--data", str(bench_shared / "dabench"), "--print-config",
                     "--c-puct", "0.5", "--decision", "value", "--temperature", "0.3", "--top-p", "0.9")
    config = record["config"]
    assert (config["c_puct"], config["decision"], config["temperature"], config["top_p"]) == (0.5, "value", 0.3, 0.9)
    assert config["prior_rule"] == "exp" and record["from_flags"]["c_puct"] == 0.5


def test_dsbench_keeps_its_own_budget_under_the_profile(capsys, tmp_path, make_task):
    root = tmp_path / "ds"
    make_task(root, "toy")
    specs = tmp_path / "tasks.json"
    rmse = "performance = np.sqrt(mean_squared_error(answers[args.value], predictions[args.value]))"
    specs.write_text(json.dumps([{"name": "toy", "metric_line": rmse, "value_col": "y", "gt": 0.0,
                                  "baseline": 4.0, "higher_is_better": False}]))
    record = _config(capsys, "bench", "dsbench", "--data", str(root), "--tasks-json", str(specs), "--print-config")
    assert (record["config"]["iterations"], record["config"]["max_depth"]) == (50, 25)
    assert record["config"]["c_puct"] == 0.0


def test_solve_print_config_in_a_real_process_and_flag_errors_name_the_flag():
    run = subprocess.run([sys.executable, "-m", "jupiter.cli", "solve", str(EXAMPLE), "--print-config",
                          "--decision", "value"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["config"]["decision"] == "value"
    bad = subprocess.run([sys.executable, "-m", "jupiter.cli", "solve", str(EXAMPLE), "--print-config",
                          "--top-p", "1.5"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert bad.returncode == 2 and "--top-p" in bad.stderr and "SearchConfig" not in bad.stderr


@pytest.mark.parametrize("flag", ["--c-puct", "--decision", "--temperature", "--top-p", "--profile", "--print-config"])
def test_bench_help_lists_the_search_flags(flag, capsys):
    with pytest.raises(SystemExit):
        main(["bench", "dabench", "--help"])
    assert flag in capsys.readouterr().out
