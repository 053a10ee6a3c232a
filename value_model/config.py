"""Frozen, validated settings for the value model: its architecture (saved with it) and its training run.

Every field is checked when the object is built, and an error names the field, so a bad command line or a
bad ``value_config.json`` fails at once instead of an hour into training.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "ConfigError",
    "TemplateName",
    "ModelConfig",
    "TrainConfig",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_LORA_TARGETS",
]

#: The token budget of one path (system + task + the most recent turns that fit).
DEFAULT_MAX_TOKENS = 8000
#: Attention and MLP projections of Llama/Gemma/Qwen/Mistral-style decoders.
DEFAULT_LORA_TARGETS: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class ConfigError(ValueError):
    """A value-model setting is invalid; the message names the field."""


class TemplateName(str, enum.Enum):
    """Which ``jupiter.prompts`` chat template renders a path into text."""

    GEMMA = "gemma"
    CHATML = "chatml"

    def template(self):  # -> jupiter.prompts.ChatTemplate
        from jupiter.prompts import CHATML, GEMMA

        return GEMMA if self is TemplateName.GEMMA else CHATML


def _check(condition: bool, owner: str, name: str, message: str) -> None:
    if not condition:
        raise ConfigError(f"{owner}.{name}: {message}")


@dataclass(frozen=True)
class ModelConfig:
    """What a saved value model is: backbone, LoRA shape, head, and how paths become text.

    Saved as ``value_config.json`` next to the adapter and the head, so a scorer rebuilds exactly the model
    that was trained (and renders and truncates paths exactly as training did).
    """

    backbone: str  # Hugging Face folder or hub id of the causal-LM backbone (overridable at load time)
    lora_r: int = 8
    lora_alpha: int = 32
    lora_dropout: float = 0.1
    lora_targets: tuple[str, ...] = DEFAULT_LORA_TARGETS
    lora_layers: tuple[int, ...] | None = None  # decoder layer indices to adapt (None: all); top layers only
    # make training cheaper: no gradient flows below the lowest adapted layer
    head_dropout: float = 0.1
    head_init_std: float = 1e-3  # small Gaussian init: the untrained head predicts ≈ 0 for every state
    head_center_momentum: float = 0.05  # running-mean rate of the head's feature centering (see ValueHead)
    max_tokens: int = DEFAULT_MAX_TOKENS  # truncation budget of one path, in backbone tokens
    template: TemplateName = TemplateName.GEMMA

    def __post_init__(self) -> None:
        owner = "ModelConfig"
        _check(isinstance(self.backbone, str) and bool(self.backbone), owner, "backbone", "must be a non-empty path")
        _check(isinstance(self.lora_r, int) and self.lora_r > 0, owner, "lora_r", f"must be a positive int, got {self.lora_r!r}")
        _check(self.lora_alpha > 0, owner, "lora_alpha", f"must be > 0, got {self.lora_alpha!r}")
        _check(0.0 <= self.lora_dropout < 1.0, owner, "lora_dropout", f"must be in [0, 1), got {self.lora_dropout!r}")
        _check(0.0 <= self.head_dropout < 1.0, owner, "head_dropout", f"must be in [0, 1), got {self.head_dropout!r}")
        _check(0.0 < self.head_center_momentum <= 1.0, owner, "head_center_momentum",
               f"must be in (0, 1], got {self.head_center_momentum!r}")
        _check(self.head_init_std > 0, owner, "head_init_std", f"must be > 0, got {self.head_init_std!r}")
        _check(len(self.lora_targets) > 0, owner, "lora_targets", "name at least one module")
        _check(isinstance(self.max_tokens, int) and self.max_tokens >= 32, owner, "max_tokens",
               f"must be an int >= 32, got {self.max_tokens!r}")
        object.__setattr__(self, "lora_targets", tuple(self.lora_targets))
        if self.lora_layers is not None:
            _check(len(self.lora_layers) > 0 and all(isinstance(i, int) and i >= 0 for i in self.lora_layers),
                   owner, "lora_layers", f"must be None or non-negative layer indices, got {self.lora_layers!r}")
            object.__setattr__(self, "lora_layers", tuple(self.lora_layers))
        try:
            object.__setattr__(self, "template", TemplateName(self.template))
        except ValueError:
            raise ConfigError(f"{owner}.template: must be one of {[t.value for t in TemplateName]}, "
                              f"got {self.template!r}") from None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["lora_targets"] = list(self.lora_targets)
        data["lora_layers"] = None if self.lora_layers is None else list(self.lora_layers)
        data["template"] = self.template.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ModelConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known - {"format_version"})
        if unknown:
            raise ConfigError(f"ModelConfig: unknown field(s) {unknown}")
        values = {k: v for k, v in data.items() if k in known}
        if "lora_targets" in values:
            values["lora_targets"] = tuple(values["lora_targets"])
        if values.get("lora_layers") is not None:
            values["lora_layers"] = tuple(values["lora_layers"])
        return cls(**values)


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Sizes are in samples (paths) and optimizer steps unless said otherwise."""

    epochs: int = 2
    batch_size: int = 4  # paths per forward pass
    grad_accumulation: int = 4  # forward passes per optimizer step
    learning_rate: float = 1e-4
    head_learning_rate: float | None = None  # defaults to learning_rate; the fresh head often wants more
    weight_decay: float = 0.01
    warmup_ratio: float = 0.05  # fraction of all optimizer steps spent warming the LR up linearly
    max_grad_norm: float = 1.0
    eval_fraction: float = 0.1  # held-out share of the samples (split by sample, seeded)
    gradient_checkpointing: bool = True
    length_grouping: bool = True  # batch paths of similar length: padding costs compute
    checkpoint_every: int = 0  # optimizer steps between resumable checkpoints (0: only at each epoch end)
    seed: int = 0
    device: str | None = None  # "cpu", "cuda", "cuda:1", ...; None picks cuda when available
    progress: bool = True  # tqdm bar on stderr
    max_steps: int = 0  # stop after this many optimizer steps (0: no limit; for smoke tests)

    def __post_init__(self) -> None:
        owner = "TrainConfig"
        for name in ("epochs", "batch_size", "grad_accumulation"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value > 0, owner, name, f"must be a positive int, got {value!r}")
        for name in ("checkpoint_every", "max_steps"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value >= 0, owner, name, f"must be an int >= 0, got {value!r}")
        _check(self.learning_rate > 0, owner, "learning_rate", f"must be > 0, got {self.learning_rate!r}")
        _check(self.head_learning_rate is None or self.head_learning_rate > 0, owner, "head_learning_rate",
               f"must be > 0 or None, got {self.head_learning_rate!r}")
        _check(self.weight_decay >= 0, owner, "weight_decay", f"must be >= 0, got {self.weight_decay!r}")
        _check(0.0 <= self.warmup_ratio < 1.0, owner, "warmup_ratio", f"must be in [0, 1), got {self.warmup_ratio!r}")
        _check(self.max_grad_norm > 0, owner, "max_grad_norm", f"must be > 0, got {self.max_grad_norm!r}")
        _check(0.0 <= self.eval_fraction < 1.0, owner, "eval_fraction",
               f"must be in [0, 1), got {self.eval_fraction!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
