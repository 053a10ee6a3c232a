"""Shared fixtures for value-model tests: the real tiny Gemma 3 270M backbone and its tokenizer (CPU)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def backbone() -> str:
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from jupiter.default_model import ModelError, ensure_default_model

    try:
        return str(ensure_default_model())
    except ModelError as exc:
        pytest.skip(f"default model unavailable: {exc}")


@pytest.fixture(scope="session")
def tokenizer(backbone: str):
    from value_model.model import load_tokenizer

    return load_tokenizer(backbone)
