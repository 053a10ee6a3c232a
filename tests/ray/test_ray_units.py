"""The Ray layer's pure parts, without a cluster: manifest, file names, failure causes, worker planning,
cost estimate, the working-dir check and the collect CLI's argument handling."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ray_fixtures import write_replay, write_tasks

from jupiter.commands.collect import build_config, collect_parser, estimate_cost, main
from search import Mode, SearchConfig, Tree
from search.profiles import resolve_profile
from search.ray_driver import RayResources, absolute_spec, plan_workers, policy_is_shared
from search.ray_failures import classify_failure
from search.ray_manifest import (
    DeathCause,
    Manifest,
    ManifestRecord,
    TaskStatus,
    tree_file_name,
)
from search.ray_workdir import DEFAULT_EXCLUDES, check_working_dir
from search.tree_io import save_tree

REPO = Path(__file__).resolve().parents[2]


def test_manifest_last_record_wins_and_torn_lines_are_skipped(tmp_path):
    manifest = Manifest(tmp_path)
    manifest.append(ManifestRecord("a", TaskStatus.WORKER_DIED, 1, worker="w0", cause=DeathCause.KILLED))
    manifest.append(ManifestRecord("a", TaskStatus.OK, 2, worker="w1", best_reward=1.0, nodes=7))
    manifest.append(ManifestRecord("b", TaskStatus.TREE_ERROR, 1, error="sandbox root failed"))
    with open(manifest.path, "a") as handle:
        handle.write('{"task_id": "c", "status": "o')  # a driver killed mid-write
    assert manifest.finished_ids() == {"a"}
    assert manifest.attempts() == {"a": 2, "b": 1}
    first = manifest.read()[0]
    assert first.cause is DeathCause.KILLED
    assert json.loads(manifest.path.read_text().splitlines()[0])["cause"] == "killed"


def test_record_rejects_bad_fields():
    with pytest.raises(ValueError, match="attempt"):
        ManifestRecord("a", TaskStatus.OK, 0)
    with pytest.raises(ValueError):
        ManifestRecord("a", "finished", 1)


def test_tree_file_names_are_safe_and_distinct():
    names = {tree_file_name(i) for i in ("owner/repo/nb.ipynb#3fa2", "owner_repo_nb.ipynb_3fa2", "../../etc", "")}
    assert len(names) == 4
    assert all("/" not in n and not n.startswith(".") and n.endswith(".json") for n in names)


def test_tree_is_written_atomically(tmp_path, task_files_local):
    from jupiter.task import load_tasks
    from search import load_tree

    task = load_tasks(task_files_local[0])[0]
    path = save_tree(Tree(task), tmp_path / "trees" / tree_file_name(task.id), durable=True)
    assert load_tree(path).task.id == task.id
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left behind


def test_failure_causes():
    import ray.exceptions as rex

    assert classify_failure(rex.OutOfMemoryError("Task was killed due to the node running low on memory"))[0] \
        is DeathCause.OUT_OF_MEMORY
    died = rex.ActorDiedError()
    died.error_msg = ("The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker "
                      "exit detail: Worker unexpectedly exits with a connection error code 2. End of file. Some "
                      "common causes include: (1) the process was killed by the OOM killer")
    cause, detail = classify_failure(died)
    assert cause is DeathCause.KILLED and "SIGKILL" in detail
    oom = rex.ActorDiedError()
    oom.error_msg = "The actor died because the worker was killed due to memory pressure (OOM)."
    assert classify_failure(oom)[0] is DeathCause.OUT_OF_MEMORY
    try:
        raise ValueError("policy server down")
    except ValueError as exc:
        task_error = rex.RayTaskError("run", "traceback", exc)
    cause, detail = classify_failure(task_error)
    assert cause is DeathCause.ERROR and "policy server down" in detail


def test_plan_workers_from_cluster_resources():
    gib = 2**30
    res = RayResources(worker_cpus=1, worker_memory_mb=2048, policy_cpus=1, policy_memory_mb=6144)
    assert plan_workers({"CPU": 2, "memory": 8 * gib}, res, False, False, tasks=20) == 2
    assert plan_workers({"CPU": 2, "memory": 8 * gib}, res, True, False, tasks=20) == 1  # the model takes a CPU
    assert plan_workers({"CPU": 16, "GPU": 1, "memory": 12 * gib}, res, True, False, tasks=20) == 3  # memory-bound
    assert plan_workers({"CPU": 16, "memory": 64 * gib}, res, False, False, tasks=5) == 5  # one per task at most
    assert plan_workers({"CPU": 16}, res, False, False, tasks=20, requested=4) == 4
    with pytest.raises(ValueError, match="workers"):
        plan_workers({"CPU": 2}, res, False, False, tasks=3, requested=0)
    with pytest.raises(ValueError, match="worker_memory_mb"):
        RayResources(worker_memory_mb=1)


def test_policy_placement_and_spec_paths(tmp_path, monkeypatch):
    assert not policy_is_shared("http://127.0.0.1:8000/v1#model=m")
    assert not policy_is_shared("replay:x.json")
    assert policy_is_shared("vllm:/models/m") and policy_is_shared("default")
    monkeypatch.chdir(tmp_path)
    assert absolute_spec("replay:s.json") == f"replay:{tmp_path / 's.json'}"
    assert absolute_spec("http://h/v1") == "http://h/v1"


def test_cost_estimate():
    config = SearchConfig(mode=Mode.COLLECT, iterations=50, expansions=3, max_tokens=1024, max_trees_in_flight=16)
    est = estimate_cost(trees=40, skipped=2, config=config, workers=2)
    assert (est.max_nodes_per_tree, est.max_nodes, est.expected_nodes) == (151, 6040, 6040)
    assert (est.policy_requests, est.completions, est.max_completion_tokens) == (2000, 6000, 6000 * 1024)
    assert est.batched_calls == 2 * 50 * 2  # two rounds of 32 trees, 50 steps, per worker
    assert estimate_cost(10, 0, config, 1, observed_nodes=[30, 50]).expected_nodes == 400


def test_collect_defaults_are_the_papers():
    config = build_config(collect_parser().parse_args(["--tasks", "t.jsonl", "--out", "o"]))
    assert config == resolve_profile("paper", Mode.COLLECT)
    assert (config.iterations, config.max_depth, config.expansions, config.temperature, config.top_p,
            config.c_puct, config.partial_credit) == (50, 10, 3, 1.0, 0.95, 1.25, False)
    flags = build_config(collect_parser().parse_args(["-k", "2", "--c-puct", "0.5", "--partial-credit",
                                                      "--trees-per-worker", "4"]))
    assert (flags.expansions, flags.c_puct, flags.partial_credit, flags.max_trees_in_flight) == (2, 0.5, True, 4)


def test_collect_dry_run_and_errors(tmp_path, capsys, task_files_local):
    tasks, _ = task_files_local
    assert main(["--tasks", str(tasks), "--out", str(tmp_path / "o"), "--dry-run", "--workers", "2",
                 "--iterations", "5"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"]["trees"] == 10 and out["dry_run"]["max_nodes"] == 10 * 16
    unlabeled = tmp_path / "u.jsonl"
    unlabeled.write_text(json.dumps({"id": "x", "task": "q?", "file_names": []}) + "\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["--tasks", str(unlabeled), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert "no label" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--tasks", str(tasks), "--out", str(tmp_path / "o"), "--iterations", "0"])
    err = capsys.readouterr().err
    assert "--iterations" in err and "SearchConfig" not in err
    with pytest.raises(SystemExit):
        main(["--tasks", str(tasks), "--out", str(tmp_path / "o"), "--trees-per-worker", "0"])
    err = capsys.readouterr().err
    assert "--trees-per-worker" in err and "SearchConfig" not in err


def test_collect_checks_out_before_starting_ray(tmp_path, capsys, task_files_local):
    tasks, _ = task_files_local
    taken = tmp_path / "a-file"
    taken.write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        main(["--tasks", str(tasks), "--out", str(taken)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--out" in err and str(taken) in err and taken.read_text() == "x"


def test_check_working_dir_names_the_largest_files(tmp_path):
    root = tmp_path / "proj"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text("x = 1\n" * 100)
    (root / "big.csv").write_bytes(b"0" * 300_000)
    (root / ".git" / "objects").mkdir(parents=True)
    (root / ".git" / "objects" / "pack").write_bytes(b"0" * 500_000)
    (root / "runs").mkdir()
    (root / "runs" / "tree.json").write_bytes(b"0" * 200_000)
    (root / "pkg" / "cache.tmp").write_bytes(b"0" * 100_000)
    (root / "pkg" / ".gitignore").write_text("*.tmp\n")
    report = check_working_dir(root, excludes=DEFAULT_EXCLUDES)
    assert report.files == 3  # mod.py, big.csv, pkg/.gitignore
    assert report.largest[0] == ("big.csv", 300_000)
    assert report.excluded_bytes == 800_000
    assert not report.over_limit
    everything = check_working_dir(root, excludes=(), use_ignore_files=False)
    assert everything.largest[0] == (".git/objects/pack", 500_000)


def test_collect_script_checks_a_working_dir(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"1" * 1000)
    done = subprocess.run([sys.executable, str(REPO / "search" / "collect.py"), "--check-working-dir", str(tmp_path),
                           "--exclude", "*.bin"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == 0


@pytest.fixture()
def task_files_local(tmp_path):
    folder = tmp_path / "tasks"
    return write_tasks(folder), write_replay(folder)
