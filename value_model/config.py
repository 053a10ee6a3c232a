"""Frozen, validated settings for the value model: its architecture (saved with it) and its training run.

Every field is checked when the object is built, and an error names the field, so a bad command line or a
bad ``value_config.json`` fails at once instead of an hour into training.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConfigError",
    "TemplateName",
    "ModelConfig",
    "TrainConfig",
    "TRAIN_PROFILES",
    "TRAIN_SOURCES",
    "DEFAULT_TRAIN_PROFILE",
    "train_profile",
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
        _check(isinstance(self.lora_r, int) and self.lora_r > 0, owner, "lora_r",
               f"must be a positive int, got {self.lora_r!r}")
        _check(self.lora_alpha > 0, owner, "lora_alpha", f"must be > 0, got {self.lora_alpha!r}")
        _check(0.0 <= self.lora_dropout < 1.0, owner, "lora_dropout",
               f"must be in [0, 1), got {self.lora_dropout!r}")
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
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
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


#: Where the training defaults come from. "paper": the seed paper's value-model training setup (as issue 12
#: quotes it: 3 epochs, batch size 4, learning rate 1e-4, 100 warm-up steps, weight decay 0.01, clipping 1.0);
#: "reference code": the authors' mcts_search/value_model/train.py (HF Trainer: per-device batch 1 x 4
#: accumulation, warmup_steps=100, weight_decay=0.01, max_grad_norm=1.0, 3 epochs, lr 1e-4, linear decay).
_REF_TRAINER = "reference code mcts_search/value_model/train.py"


@dataclass(frozen=True)
class TrainConfig:
    """One training run. Sizes are in samples (paths) and optimizer steps unless said otherwise.

    The defaults are the paper's (``TRAIN_PROFILES["paper"]``); one optimizer step sees
    ``batch_size * grad_accumulation`` paths, and a run makes ``epochs * ceil(batches / grad_accumulation)``
    steps (``value_model.train.training_schedule``). With ``packing``, a batch is a pack of one tree's paths
    instead (as many as fit ``pack_tokens``), so a run over trees makes fewer, larger steps.
    """

    epochs: int = 3  # paper: 3 epochs (reference code: num_train_epochs=3)
    batch_size: int = 4  # paper: batch size 4 (reference code: 1 per device x 4 accumulation: same steps)
    grad_accumulation: int = 1  # paper: batch size 4 is one optimizer step (see batch_size)
    learning_rate: float = 1e-4  # paper: learning rate 1e-4 (reference code: learning_rate 1e-4)
    head_learning_rate: float | None = None  # ours: defaults to learning_rate; short runs may give the head more
    weight_decay: float = 0.01  # paper: weight decay 0.01 (reference code: weight_decay=0.01, AdamW)
    warmup_steps: int = 100  # paper: 100 linear warm-up steps (reference code: warmup_steps=100), then linear decay
    max_grad_norm: float = 1.0  # paper: gradient clipping 1.0 (reference code: max_grad_norm=1.0)
    eval_fraction: float = 0.1  # ours: held-out share of the samples (split by sample, seeded)
    gradient_checkpointing: bool = True  # reference code: gradient_checkpointing=True
    length_grouping: bool = True  # ours: batch paths of similar length: padding costs compute
    checkpoint_every: int = 0  # ours: optimizer steps between resumable checkpoints (0: only at each epoch end)
    seed: int = 0
    device: str | None = None  # "cpu", "cuda", "cuda:1", ...; None picks cuda when available
    progress: bool = True  # tqdm bar on stderr
    max_steps: int = 0  # stop after this many optimizer steps (0: no limit; for smoke tests)
    packing: bool = True  # ours: train the samples of one tree as packs (value_model.packing), each shared token
    # computed once; samples without a tree (no ``sources``) or cut by the token budget go per path
    pack_tokens: int = DEFAULT_MAX_TOKENS  # ours: token budget of one pack (the paper's 8,000-token path budget)

    def __post_init__(self) -> None:
        owner = "TrainConfig"
        for name in ("epochs", "batch_size", "grad_accumulation"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value > 0, owner, name, f"must be a positive int, got {value!r}")
        _check(isinstance(self.pack_tokens, int) and self.pack_tokens >= 32, owner, "pack_tokens",
               f"must be an int >= 32, got {self.pack_tokens!r}")
        for name in ("checkpoint_every", "max_steps", "warmup_steps"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value >= 0, owner, name, f"must be an int >= 0, got {value!r}")
        _check(self.learning_rate > 0, owner, "learning_rate", f"must be > 0, got {self.learning_rate!r}")
        _check(self.head_learning_rate is None or self.head_learning_rate > 0, owner, "head_learning_rate",
               f"must be > 0 or None, got {self.head_learning_rate!r}")
        _check(self.weight_decay >= 0, owner, "weight_decay", f"must be >= 0, got {self.weight_decay!r}")
        _check(self.max_grad_norm > 0, owner, "max_grad_norm", f"must be > 0, got {self.max_grad_norm!r}")
        _check(0.0 <= self.eval_fraction < 1.0, owner, "eval_fraction",
               f"must be in [0, 1), got {self.eval_fraction!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"TrainConfig: unknown field(s) {unknown}")
        return cls(**dict(data))


#: Named training settings. ``paper`` (the default of ``jupiter value train``) is the paper's setup; ``cpu-small``
#: is what the learning test shows working on 2 CPU cores with the tiny backbone and a few dozen paths (a fresh
#: head needs a larger step there, and 100 warm-up steps would be the whole run).
TRAIN_PROFILES: dict[str, TrainConfig] = {
    "paper": TrainConfig(),
    "cpu-small": TrainConfig(epochs=10, batch_size=4, grad_accumulation=1, learning_rate=1e-3,
                             head_learning_rate=1e-3, warmup_steps=4, gradient_checkpointing=False),
}
DEFAULT_TRAIN_PROFILE = "paper"

#: Source of each paper-fixed training default (printed by ``jupiter value train --print-config``).
TRAIN_SOURCES: dict[str, str] = {
    "epochs": "paper (3 epochs); " + _REF_TRAINER + ": num_train_epochs=3",
    "batch_size": "paper (batch size 4); " + _REF_TRAINER + ": 1 per device x gradient_accumulation_steps=4",
    "grad_accumulation": "paper (batch size 4 = one optimizer step)",
    "learning_rate": "paper (1e-4); " + _REF_TRAINER + ": learning_rate=1e-4",
    "weight_decay": "paper (0.01); " + _REF_TRAINER + ": weight_decay=0.01",
    "warmup_steps": "paper (100 warm-up steps, linear); " + _REF_TRAINER + ": warmup_steps=100",
    "max_grad_norm": "paper (clipping 1.0); " + _REF_TRAINER + ": max_grad_norm=1.0",
    "gradient_checkpointing": _REF_TRAINER + ": gradient_checkpointing=True",
    "pack_tokens": "ours: the paper's 8,000-token budget of one path, as the budget of one tree pack",
}


def train_profile(name: str, **overrides: Any) -> TrainConfig:
    """The ``TrainConfig`` of profile ``name`` with ``overrides`` applied (None values are ignored)."""
    if name not in TRAIN_PROFILES:
        raise ConfigError(f"TrainConfig profile: unknown {name!r}; known: {sorted(TRAIN_PROFILES)}")
    changes = {k: v for k, v in overrides.items() if v is not None}
    try:
        return dataclasses.replace(TRAIN_PROFILES[name], **changes)
    except TypeError as exc:
        raise ConfigError(f"TrainConfig: {exc}") from None
