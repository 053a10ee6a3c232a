"""Fixtures shared by every test area: where the shared benchmark data lives, and the slow marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _shared_dir() -> Path:
    configured = os.environ.get("JUPITER_SHARED")
    return Path(configured) if configured else REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = _shared_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder not found at {path} (set JUPITER_SHARED)")
    return path


@pytest.fixture(scope="session")
def dabench_dir(shared_dir: Path) -> Path:
    return shared_dir / "benchmarks" / "dabench"


@pytest.fixture(scope="session")
def repo_dir() -> Path:
    return REPO
