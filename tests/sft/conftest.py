"""Fixtures of the SFT tests: a small SFT file, the embedded base model and its tokenizer, a tiny adapter."""

from __future__ import annotations

from pathlib import Path

import pytest
from sft_rows import TINY, short_rows, write_rows


@pytest.fixture
def sft_file(tmp_path: Path) -> Path:
    return write_rows(tmp_path / "sft_sharegpt.jsonl", 6)


@pytest.fixture(scope="session")
def base_model_dir() -> Path:
    pytest.importorskip("peft")
    from jupiter.default_model import ensure_default_model

    return ensure_default_model()


@pytest.fixture(scope="session")
def tokenizer(base_model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(base_model_dir))


@pytest.fixture(scope="session")
def tiny_adapter(tmp_path_factory, base_model_dir) -> Path:
    folder = tmp_path_factory.mktemp("sft")
    data = short_rows(folder / "sft_sharegpt.jsonl", 4)
    out = folder / "adapter"
    from jupiter.cli import main

    assert main(["sft", str(data), "--out", str(out), *TINY]) == 0
    return out
