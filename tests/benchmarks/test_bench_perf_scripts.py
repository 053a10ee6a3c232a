"""The speed benchmarks under ``benchmarks/perf/`` still run and print the keys their reports need.

Tiny settings: these check the scripts, not the numbers (targets live in the scripts' own JSON output).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PERF = Path(__file__).resolve().parents[2] / "benchmarks" / "perf"


def _run(script: str, *args: str, env_shared: Path | None = None) -> dict:
    env = None if env_shared is None else dict(os.environ, JUPITER_SHARED=str(env_shared))
    proc = subprocess.run([sys.executable, str(PERF / script), "--json", *args], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_sandbox_branching_prints_its_keys(shared_dir: Path) -> None:
    result = _run("sandbox_branching.py", "--skip-replay", "-k", "1", "--rounds", "1", "--generate-s", "0.2",
                  env_shared=shared_dir)
    for key in ("fork_ms_d1", "fork_ms_d10", "ahead_ms_d10", "cell_ms_d10", "uss_mb_per_state",
                "target_fork_le_1_2_cell_plus_20ms", "target_sync_fork_le_1_2_cell_plus_20ms"):
        assert key in result
    assert result["fork_ms_d10"] > 0 and result["ahead_ms_d10"] > 0 and result["huge_pages"] is True
    assert result["fork_stats"]["forks"] >= 3 and result["fork_stats"]["fork_fallbacks"] == 0
    # one branch a depth asked for ahead, and taken
    assert result["fork_stats"]["branches_ahead"] == result["fork_stats"]["branches_ahead_taken"] == 3


def test_sandbox_start_prints_its_keys() -> None:
    result = _run("sandbox_start.py", "--sandboxes", "2", "--heap-mb", "5")
    assert result["sandboxes"] == 2 and result["host_objects"] > 0
    assert 0 < result["spawn_ms"]["median"] <= result["spawn_ms"]["max"]
    assert result["ticker_stall_ms"]["n"] > 0 and result["start_s"] > 0 and result["host_cpu_ms_per_start"] > 0


def test_scale_live_states_times_the_budget_check_and_explains_slow_branches(shared_dir: Path) -> None:
    result = _run("scale.py", "--sizes", "4", "--trees", "0", "--branches", "6", "--budget-ab", "--interleave",
                  env_shared=shared_dir)
    on, off = result["live_states"]
    assert on["memory_budget"] is True and off["memory_budget"] is False
    for row in (on, off):  # the keys reports already read, and the attribution of the tail
        for key in ("branch_ms_p50", "branch_ms_p95", "create_s", "uss_mb", "kernel_stalls", "limit_reached",
                    "cpu_ms", "runqueue_ms", "blocked_ms", "host_gc", "kernel_threads_cpu_ms", "slow_branches"):
            assert key in row
        assert row["branches"] == 6 and row["cpu_ms"]["p50"] > 0 and len(row["host_gc"]["collections"]) == 3
    # three of the six branches checked the budget (the others were the interleaved off arm), each timed
    assert 0 < on["budget_check_ms"]["p50"] <= on["budget_check_ms"]["max"]
    assert 0 < on["budget_check_share_pct"] < 100 and not on["limit_reached"]
    assert set(on["ab_interleaved"]) == {"on_ms_p50", "on_ms_p95", "off_ms_p50", "off_ms_p95"}
    assert "budget_check_ms" not in off and "ab_interleaved" not in off


def test_engine_overhead_prints_its_keys() -> None:
    result = _run("engine_overhead.py", "--trees", "2", "--iterations", "5", "--no-sandbox")
    null = result["null"]
    assert null["steps"] == 5 and null["model_calls_per_step"] == 1.0 and null["nodes"] == 30
    assert null["engine_ms_per_node"] >= 0 and result["target_engine_ms_per_node"] == 5.0


@pytest.mark.slow
def test_ray_scaling_runs_on_tiny_settings() -> None:
    result = _run("ray_scaling.py", "--trees", "4", "--iterations", "2", "--trees-per-worker", "1")
    assert result["one_worker"]["nodes"] == result["two_workers"]["nodes"] > 0
    assert result["speedup"] > 0 and result["wave_bound"] == 2.0


@pytest.mark.slow
def test_value_scoring_compares_whole_paths_with_shared_prefixes() -> None:
    result = _run("value_scoring.py", "--states", "3", "--batch-sizes", "3", "--siblings", "3", "--max-tokens", "256")
    rows = {(r["length_sorted"], r["shared_prefix"]): r for r in result["results"]}
    assert set(rows) == {(True, False), (False, False), (True, True)}
    shared = rows[True, True]
    assert shared["max_abs_diff_vs_whole"] < 1e-4 and shared["speedup_vs_whole"] > 0
    assert shared["computed_tokens"] < shared["real_tokens"] == rows[True, False]["computed_tokens"]


def _scored_tree(task_id: str, seed: int):
    """A small tree whose live steps carry value estimates, as a ``--value-model`` run saves them."""
    import random

    from jupiter.task import Task
    from search.tree import NodeStatus, Tree

    rng = random.Random(seed)
    tree = Tree(Task(id=task_id, question=f"What is the mean fare of table {task_id}?", format="@mean[value]",
                     files=()))
    parent = tree.root
    for depth in range(3):
        children = [tree.add_child(parent, thought=f"Step {depth}: look at column {rng.randint(0, 9)}.",
                                   code=f"print(df.iloc[:, {k}].describe())", status=NodeStatus.CODE_OK,
                                   observation="\n".join(f"{rng.random():.4f}" for _ in range(8)))
                    for k in range(3)]
        for child in children:
            child.evaluation = 0.0
        parent = children[0]
    return tree


@pytest.mark.slow
def test_value_replay_runs_a_runs_calls_with_and_without_kept_beginnings(tmp_path: Path) -> None:
    from search.tree_io import save_tree
    from value_model.config import ModelConfig
    from value_model.model import ValueModel, resolve_backbone

    for task_id, seed in (("a", 0), ("b", 1)):
        save_tree(_scored_tree(task_id, seed), tmp_path / "run" / "trees" / f"{task_id}.json")
    ValueModel.create(ModelConfig(backbone=resolve_backbone("default"), max_tokens=512), device="cpu").save(
        tmp_path / "model")
    result = _run("value_replay.py", str(tmp_path / "run"), "--model", str(tmp_path / "model"), "--in-flight", "2")
    assert (result["calls"], result["states"]) == (3, 18)  # 3 expansions of 2 trees a call, 3 children each
    without, kept, apart, every = result["passes"]
    assert [p["keep_paths"] for p in result["passes"]] == [False, False, True, True]
    assert [p["merge_lora"] for p in result["passes"]] == [True, True, False, True]
    assert without["prefix_tokens_reused"] == 0 and kept["prefix_tokens_reused"] > 0
    assert every["tokens_run"] < kept["tokens_run"] < without["tokens_run"] < result["path_tokens"]
    assert apart["tokens_run"] == every["tokens_run"]  # merging changes how a token runs, not which
    assert result["max_abs_diff"] < 1e-4 and kept["speedup"] > 0 and every["speedup"] > 0
    only = _run("value_replay.py", str(tmp_path / "run"), "--model", str(tmp_path / "model"), "--in-flight", "2",
                "--passes", "paths")
    assert [p["pass"] for p in only["passes"]] == ["paths"] and only["max_abs_diff"] == 0.0


@pytest.mark.slow
def test_policy_throughput_puts_the_sampling_settings_side_by_side_on_one_load() -> None:
    result = _run("policy_throughput.py", "--backends", "hf", "--prompts", "1,2", "--n", "2", "--max-tokens", "4",
                  "--settings", "0.95,1.0,greedy")
    hf = result["backends"]["hf"]
    assert result["prompts"] == [1, 2] and result["settings"] == ["0.95", "1.0", "greedy"]
    top_p, full, greedy = hf["settings"]
    assert [call["sequences"] for call in top_p["calls"]] == [2, 4]  # the batch sizes, for the first setting
    assert all(call["ms_per_step"] > 0 and call["completion_tokens"] >= call["sequences"] for call in top_p["calls"])
    assert top_p["sequences"] == 2 and hf["load_s"] > 0 and hf["nucleus"] == "window"
    assert "sampling_share" in top_p and "sampling_share" in full and "sampling_share" not in greedy
    assert hf["ratio_top_p_to_top_p_1"] > 0


def test_policy_throughput_names_a_bad_setting() -> None:
    proc = subprocess.run([sys.executable, str(PERF / "policy_throughput.py"), "--json", "--settings", "0.9,warm"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--settings: 'warm' is neither a top-p in (0, 1] nor 'greedy'" in proc.stderr


def test_policy_throughput_names_a_bad_prompt_list() -> None:
    proc = subprocess.run([sys.executable, str(PERF / "policy_throughput.py"), "--json", "--prompts", "2,x"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--prompts: '2,x' is not a comma list of counts" in proc.stderr


def test_search_step_takes_only_a_vllm_spec() -> None:
    proc = subprocess.run([sys.executable, str(PERF / "search_step.py"), "--json", "--llm", "hf:default"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "give a vllm: spec" in proc.stderr


@pytest.mark.slow
def test_search_step_splits_a_real_step_into_its_parts(dabench_dir) -> None:
    pytest.importorskip("vllm")
    result = _run("search_step.py", "--trees", "2", "--iterations", "1", "--data", str(dabench_dir))
    parts = result["per_node_ms"]
    assert set(parts) == {"prefill", "decode", "sampling", "sandbox", "sandbox_start", "value", "engine"}
    assert result["nodes"] > 2 and parts["decode"] > 0 and parts["sandbox"] > 0 and parts["sampling"] > 0
    assert 0.99 <= sum(result["shares"].values()) <= 1.01
    assert result["engine_settings"]["sequences_per_call"] == 6 and 0 <= result["prefix_cache_hit_rate"] <= 1
