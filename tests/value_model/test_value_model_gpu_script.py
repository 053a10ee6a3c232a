"""scripts/value_model_gpu.sh, the collect-and-train run meant for a GPU, run small on this CPU with the real
default policy and backbone: every step runs, leaves its output, and a second run skips them all (a killed run
continues where it stopped). Slow: a real collection and a real training run."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow
SCRIPT = REPO / "scripts" / "value_model_gpu.sh"


def _run(out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DEVICE": "cpu", "TASKS": "2", "ITERATIONS": "2", "EXPANSIONS": "2", "MAX_TOKENS": "64",
           "LLM": "hf:default", "SHIPPED": "16", "TARGET": "tree-centred", "MAX_STEPS": "2", "TRAIN_TOKENS": "1024",
           "RANK_RUN": str(out / "collect"), "RANK_DATA": str(out / "bench"),
           "JUPITER": str(Path(sys.executable).with_name("jupiter"))}
    return subprocess.run(["bash", str(SCRIPT), str(out)], env=env, capture_output=True, text=True, timeout=1500)


def test_the_gpu_script_collects_trains_ranks_and_resumes(tmp_path):
    out = tmp_path / "gpu"
    first = _run(out)
    assert first.returncode == 0, first.stderr[-3000:]
    steps = [json.loads(line)["step"] for line in (out / "timings.jsonl").read_text().splitlines()]
    assert [s.split()[0] for s in steps] == ["synthesize", "collect", "extract", "train", "rank"]
    assert len(list((out / "collect" / "trees").glob("*.json"))) == 2
    # tree-centred: the shipped trees are extracted again (their shipped samples hold raw Q), the first 16 kept
    shipped = [json.loads(line) for line in (out / "shipped-samples.jsonl").read_text().splitlines()]
    with gzip.open(REPO / "data" / "value_model" / "vm5-part1" / "samples.jsonl.gz", "rt") as raw_file:
        raw = [json.loads(next(raw_file)) for _ in range(16)]
    assert [row["sources"] for row in shipped] == [row["sources"] for row in raw]
    assert any(abs(c["value"] - r["value"]) > 1e-6 for c, r in zip(shipped, raw))  # centred, not raw Q
    assert len(list((out / "shipped-trees").glob("vm5-part*/trees/*.json"))) > 100
    metrics = json.loads((out / "model" / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["train_samples"] + metrics["eval_samples"] >= 16
    rank = json.loads((out / "rank.json").read_text())
    assert {k["kind"] for k in rank["kinds"]} == {"answer", "live"}

    again = _run(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stderr.count("skipped") == 5
    assert len((out / "timings.jsonl").read_text().splitlines()) == 5  # nothing ran twice
