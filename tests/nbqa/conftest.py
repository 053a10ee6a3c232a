"""Fixtures of the NbQA pipeline tests: the real notebook corpus and its MANIFEST."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

# The tests import their fixture servers as ``tests.nbqa.*``: make the repository root importable even when
# pytest is started without it on sys.path.
_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)


@pytest.fixture(scope="session")
def corpus_dir(shared_dir: Path) -> Path:
    path = shared_dir / "notebooks"
    if not (path / "MANIFEST.jsonl").is_file():
        pytest.skip(f"notebook corpus not found at {path}")
    return path


@pytest.fixture(scope="session")
def manifest(corpus_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (corpus_dir / "MANIFEST.jsonl").read_text().splitlines() if line.strip()]
