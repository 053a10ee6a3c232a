"""Fixtures of the NbQA pipeline tests: the real notebook corpus and its MANIFEST."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def corpus_dir(shared_dir: Path) -> Path:
    path = shared_dir / "notebooks"
    if not (path / "MANIFEST.jsonl").is_file():
        pytest.skip(f"notebook corpus not found at {path}")
    return path


@pytest.fixture(scope="session")
def manifest(corpus_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (corpus_dir / "MANIFEST.jsonl").read_text().splitlines() if line.strip()]
