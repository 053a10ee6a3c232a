"""Fixtures for the benchmark tests: the shared data folders and a small DSBench-layout task builder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest


@pytest.fixture(scope="session")
def bench_shared(shared_dir: Path) -> Path:
    """``<shared>/benchmarks`` (the root conftest's ``shared_dir``; skips when the data is not there)."""
    folder = shared_dir / "benchmarks"
    if not (folder / "dabench").is_dir():
        pytest.skip(f"benchmark data not found under {folder} (set JUPITER_SHARED)")
    return folder


def make_dsbench_task(root: Path, name: str = "toy-regression", rows: int = 40, seed: int = 0) -> dict[str, Path]:
    """Write one task in the official DSBench layout; returns the paths written.

    The target is ``y = 2·x + 1``; ``test_answer.csv`` holds the truth for the test rows.
    """
    rng = np.random.default_rng(seed)
    x = rng.random(rows) * 10
    frame = pd.DataFrame({"id": np.arange(rows), "x": x, "y": 2 * x + 1})
    train, test = frame.iloc[: rows // 2], frame.iloc[rows // 2 :]
    (root / "task").mkdir(parents=True, exist_ok=True)
    data = root / "data_resplit" / name
    answers = root / "answers" / name
    data.mkdir(parents=True, exist_ok=True)
    answers.mkdir(parents=True, exist_ok=True)
    (root / "task" / f"{name}.txt").write_text(
        f"# {name}\n\nWelcome to our yearly competition!  Predict y from x. Submissions are scored by RMSE.\n"
        "Prizes: glory. Timeline: always.\n"
    )
    train.to_csv(data / "train.csv", index=False)
    test[["id", "x"]].to_csv(data / "test.csv", index=False)
    test.assign(y=0.0)[["id", "y"]].to_csv(data / "sample_submission.csv", index=False)
    test[["id", "y"]].to_csv(answers / "test_answer.csv", index=False)
    return {"answers": answers / "test_answer.csv", "data": data, "test": test[["id", "y"]]}


@pytest.fixture()
def dsbench_root(tmp_path: Path) -> Path:
    root = tmp_path / "dsbench"
    make_dsbench_task(root)
    return root


@pytest.fixture()
def make_task():
    """The builder itself, for tests that write several tasks or their own variants."""
    return make_dsbench_task
