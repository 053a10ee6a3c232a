"""Frozen, validated settings for the value model: its architecture (saved with it) and its training run.

Every field is checked when the object is built, and an error names the field, so a bad command line or a
bad ``value_config.json`` fails at once instead of an hour into training.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field
from typing_extensions import Self

from jupiter.config_model import ConfigModel, Flag
from jupiter.sft.config import Dtype

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


#: Field types of these configs: lax about 4 vs 4.0 (a hand-edited or older ``value_config.json``), strict on
#: ranges.
_Positive = Annotated[int, Field(gt=0)]
_Steps = Annotated[int, Field(ge=0)]
_Share = Annotated[float, Field(ge=0, lt=1)]


class _Config(ConfigModel):
    config_error = ConfigError

    def to_dict(self) -> dict[str, Any]:
        """Every field as JSON values (tuples as lists, enums as their values): what the run files record."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The config a ``to_dict`` recorded; an unknown key is an error (``format_version`` is the file's)."""
        return cls(**{k: v for k, v in data.items() if k != "format_version"})


class ModelConfig(_Config):
    """What a saved value model is: backbone, LoRA shape, head, and how paths become text.

    Saved as ``value_config.json`` next to the adapter and the head, so a scorer rebuilds exactly the model
    that was trained (and renders and truncates paths exactly as training did).
    """

    # Hugging Face folder or hub id of the causal-LM backbone (overridable at load time)
    backbone: Annotated[str, Field(min_length=1)]
    lora_r: _Positive = 8
    lora_alpha: _Positive = 32
    lora_dropout: _Share = 0.1
    lora_targets: Annotated[tuple[str, ...], Field(min_length=1)] = DEFAULT_LORA_TARGETS
    # decoder layer indices to adapt (None: all); top layers only make training cheaper: no gradient flows below
    # the lowest adapted layer
    lora_layers: Annotated[tuple[_Steps, ...], Field(min_length=1)] | None = None
    head_dropout: _Share = 0.1
    head_init_std: float = Field(1e-3, gt=0)  # small Gaussian init: the untrained head predicts ≈ 0 for every state
    # running-mean rate of the head's feature centering (see ValueHead)
    head_center_momentum: float = Field(0.05, gt=0, le=1)
    max_tokens: Annotated[int, Field(ge=32)] = DEFAULT_MAX_TOKENS  # truncation budget of one path, in backbone tokens
    template: TemplateName = TemplateName.GEMMA



#: Where the training defaults come from. "paper": the seed paper's value-model training setup (as issue 12
#: quotes it: 3 epochs, batch size 4, learning rate 1e-4, 100 warm-up steps, weight decay 0.01, clipping 1.0);
#: "reference code": the authors' mcts_search/value_model/train.py (HF Trainer: per-device batch 1 x 4
#: accumulation, warmup_steps=100, weight_decay=0.01, max_grad_norm=1.0, 3 epochs, lr 1e-4, linear decay).
_REF_TRAINER = "reference code mcts_search/value_model/train.py"


class TrainConfig(_Config):
    """One training run. Sizes are in samples (paths) and optimizer steps unless said otherwise.

    The defaults are the paper's (``TRAIN_PROFILES["paper"]``); one optimizer step sees
    ``batch_size * grad_accumulation`` paths, and a run makes ``epochs * ceil(batches / grad_accumulation)``
    steps (``value_model.train.training_schedule``). With ``packing``, a batch is a pack of one tree's paths
    instead (as many as fit ``pack_tokens``), so a run over trees makes fewer, larger steps.
    """

    epochs: _Positive = 3  # paper: 3 epochs (reference code: num_train_epochs=3)
    batch_size: _Positive = 4  # paper: batch size 4 (reference code: 1 per device x 4 accumulation: same steps)
    grad_accumulation: _Positive = 1  # paper: batch size 4 is one optimizer step (see batch_size)
    learning_rate: float = Field(1e-4, gt=0)  # paper: learning rate 1e-4 (reference code: learning_rate 1e-4)
    # ours: defaults to learning_rate; short runs may give the head more
    head_learning_rate: Annotated[float, Field(gt=0)] | None = None
    weight_decay: float = Field(0.01, ge=0)  # paper: weight decay 0.01 (reference code: weight_decay=0.01, AdamW)
    warmup_steps: _Steps = 100  # paper: 100 linear warm-up steps (reference code: warmup_steps=100), then linear decay
    max_grad_norm: float = Field(1.0, gt=0)  # paper: gradient clipping 1.0 (reference code: max_grad_norm=1.0)
    eval_fraction: _Share = 0.1  # ours: held-out share of the samples (split by sample, seeded)
    gradient_checkpointing: Flag = True  # reference code: gradient_checkpointing=True
    length_grouping: Flag = True  # ours: batch paths of similar length: padding costs compute
    checkpoint_every: _Steps = 0  # ours: optimizer steps between resumable checkpoints (0: only at each epoch end)
    seed: int = 0
    device: str | None = None  # "cpu", "cuda", "cuda:1", ...; None picks cuda when available
    progress: Flag = True  # tqdm bar on stderr
    max_steps: _Steps = 0  # stop after this many optimizer steps (0: no limit; for smoke tests)
    packing: Flag = True  # ours: train the samples of one tree as packs (value_model.packing), each shared token
    # computed once; samples without a tree (no ``sources``) or cut by the token budget go per path
    # ours: token budget of one pack (the paper's 8,000-token path budget)
    pack_tokens: Annotated[int, Field(ge=32)] = DEFAULT_MAX_TOKENS
    # ours: "bfloat16" = the backbone's weights in bf16 and Trainer's bf16 autocast (the head stays fp32);
    # None: bf16 on a GPU (the paper trains there), fp32 on a CPU. jupiter.sft.config.Dtype, as jupiter sft.
    dtype: Dtype | None = None



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
    return TRAIN_PROFILES[name].replace(**{k: v for k, v in overrides.items() if v is not None})
