"""Jupiter's value model: a LoRA-adapted causal LM with a value head that estimates Q of a notebook path.

- ``extract_samples`` / ``write_samples``: tree files (ours or the paper's) → JSONL training samples;
- ``prepare_path``: the one truncation + rendering, shared by training and scoring;
- ``train_value_model`` with ``ModelConfig`` / ``TrainConfig``;
- ``ValueScorer``: batched, cached scoring (the search's ``Value`` protocol: ``evaluate(histories)``).

Heavy dependencies (torch, transformers, peft) are imported only when the model, training or scorer
names are first used, so ``import value_model`` for extraction stays cheap.
"""

from __future__ import annotations

from typing import Any

from value_model.config import TRAIN_PROFILES, ConfigError, ModelConfig, TemplateName, TrainConfig, train_profile
from value_model.extract import ExtractConfig, ExtractError, Sample, extract_samples, read_samples, write_samples
from value_model.truncate import PreparedPath, path_key, prepare_path, truncate_messages

__all__ = [
    "ConfigError",
    "ModelConfig",
    "TrainConfig",
    "TRAIN_PROFILES",
    "train_profile",
    "TemplateName",
    "ExtractConfig",
    "ExtractError",
    "Sample",
    "extract_samples",
    "read_samples",
    "write_samples",
    "PreparedPath",
    "prepare_path",
    "truncate_messages",
    "path_key",
    "ValueModel",
    "ValueHead",
    "ModelLoadError",
    "ValueScorer",
    "train_value_model",
    "TrainResult",
    "EpochMetrics",
    "TrainingInterrupted",
]

_LAZY = {
    "ValueModel": "value_model.model",
    "ValueHead": "value_model.model",
    "ModelLoadError": "value_model.model",
    "ValueScorer": "value_model.scorer",
    "train_value_model": "value_model.train",
    "TrainResult": "value_model.train",
    "EpochMetrics": "value_model.train",
    "TrainingInterrupted": "value_model.train",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'value_model' has no attribute {name!r}")
