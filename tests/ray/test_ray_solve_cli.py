"""`jupiter solve TASKS.jsonl --ray`: batch solving through the Ray driver, resumable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ray_fixtures import write_replay, write_tasks

pytest.importorskip("ray")


def _solve(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    return subprocess.run([sys.executable, "-m", "jupiter.cli", "solve", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_solve_many_tasks_on_ray_then_rerun_skips(tmp_path: Path):
    tasks = write_tasks(tmp_path / "tasks", n=3)
    replay = write_replay(tmp_path / "tasks", n=3)
    out = tmp_path / "out"
    args = [str(tasks), "--ray", "--llm", f"replay:{replay}", "--mode", "collect", "--iterations", "6",
            "--out", str(out), "--workers", "1", "--no-progress"]
    proc = _solve(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["done"] == 3 and summary["solved"] == 3 and summary["skipped"] == 0
    assert len(list((out / "trees").glob("*.json"))) == 3
    again = _solve(args, tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["skipped"] == 3


def test_collect_on_ray_needs_labels(tmp_path: Path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "a", "question": "q?", "files": []}\n')
    proc = _solve([str(path), "--ray", "--mode", "collect", "--llm", "replay:x.json"], tmp_path)
    assert proc.returncode == 2 and "needs labels" in proc.stderr and "a" in proc.stderr
