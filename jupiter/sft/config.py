"""Training settings of ``jupiter sft``: one frozen, validated model and the named profiles.

Two profiles, because the two uses differ by orders of magnitude in compute:

* ``paper``: what the Jupiter paper used to fine-tune its policies on NbQA with LLaMA-Factory (each value's
  source is in the comment beside it). Meant for a GPU and a 7B model.
* ``cpu``: the embedded Gemma 3 270M on a 2-core CPU, in about an hour. A tiny model and a short run want a
  larger LoRA rank and a higher learning rate; float32 so that the small LoRA updates are not rounded away
  (bf16 speed on these CPUs is not measured); a sequence cap so that one long sample cannot stall a step.

Every field can be overridden from the command line; ``jupiter sft --print-config`` shows the result.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from pydantic import Field, model_validator

from jupiter.config_model import ConfigModel, Flag, Fraction, PositiveInt

__all__ = ["Schedule", "Dtype", "SftConfig", "PROFILES", "DEFAULT_PROFILE", "profile", "SftConfigError"]


class SftConfigError(ValueError):
    """A bad training setting; the message names the field."""


class Schedule(str, enum.Enum):
    """Learning-rate schedule after the linear warm-up (names as transformers' ``lr_scheduler_type``)."""

    COSINE = "cosine"
    LINEAR = "linear"
    CONSTANT = "constant_with_warmup"


class Dtype(str, enum.Enum):
    """Precision the model is trained in (the LoRA weights and the frozen backbone alike)."""

    FLOAT32 = "float32"
    BFLOAT16 = "bfloat16"

    def to_torch(self) -> Any:
        """The ``torch.dtype`` of this precision (torch is imported here, not by the settings)."""
        import torch

        return torch.float32 if self is Dtype.FLOAT32 else torch.bfloat16


class SftConfig(ConfigModel):
    """Settings of one LoRA fine-tuning run.

    Attributes:
        lora_r: LoRA rank.
        lora_alpha: LoRA scaling numerator (the update is scaled by alpha / r).
        lora_dropout: dropout on the LoRA input.
        target_modules: which linear layers get adapters; ``all-linear`` = every linear layer but the output
            layer (what LLaMA-Factory's ``lora_target: all`` means).
        learning_rate: peak learning rate (AdamW).
        schedule: decay after warm-up.
        warmup_ratio: share of the optimizer steps spent warming up linearly from 0.
        weight_decay: AdamW weight decay.
        max_grad_norm: gradient clipping.
        batch_size: samples per optimizer step (the effective batch).
        micro_batch_size: samples per forward pass; ``batch_size / micro_batch_size`` passes are accumulated.
        epochs: passes over the data (ignored when ``max_steps`` is set).
        max_steps: stop after this many optimizer steps (None: run ``epochs``).
        max_len: token cap of one sample; longer ones are cut at the end (their later turns lose their loss).
        dtype: training precision.
        logits_where_loss: compute the output layer only at positions whose label counts (the vocabulary of
            Gemma 3 is 262k tokens, so the full logits are most of the compute and memory).
        group_by_length: batch samples of similar length together (less padding).
        save_steps: optimizer steps between checkpoints.
        logging_steps: optimizer steps between loss lines.
        seed: seed of the LoRA initialisation, dropout and data order.
    """

    config_error = SftConfigError

    lora_r: PositiveInt = 16
    lora_alpha: PositiveInt = 32
    lora_dropout: Fraction = 0.0
    target_modules: str = "all-linear"
    learning_rate: float = Field(5e-4, gt=0)
    schedule: Schedule = Schedule.COSINE
    warmup_ratio: Fraction = 0.05
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    batch_size: PositiveInt = 8
    micro_batch_size: PositiveInt = 2
    epochs: float = Field(1.0, gt=0)
    max_steps: PositiveInt | None = None
    max_len: int = Field(1024, strict=True, ge=16)
    dtype: Dtype = Dtype.FLOAT32
    logits_where_loss: Flag = True
    group_by_length: Flag = True
    save_steps: PositiveInt = 10
    logging_steps: PositiveInt = 1
    seed: int = 0

    @model_validator(mode="after")
    def _whole_micro_batches(self) -> SftConfig:
        if self.batch_size % self.micro_batch_size:
            raise ValueError(f"batch_size ({self.batch_size}) must be a multiple of micro_batch_size "
                             f"({self.micro_batch_size})")
        return self

    @property
    def grad_accumulation(self) -> int:
        return self.batch_size // self.micro_batch_size

    def to_dict(self) -> dict[str, Any]:
        """Every field, enums as their values (what ``training.json`` records)."""
        return self.model_dump(mode="json")

    def with_overrides(self, overrides: Mapping[str, Any]) -> SftConfig:
        """A copy with the given fields replaced (None values are ignored), validated again; an unknown name is an
        error."""
        return self.replace(**{k: v for k, v in overrides.items() if v is not None})


PROFILES: dict[str, SftConfig] = {
    "paper": SftConfig(
        lora_r=8,  # paper, appendix (SFT): "LoRA rank 8"
        lora_alpha=16,  # not stated; LLaMA-Factory's default lora_alpha is 2 x rank
        lora_dropout=0.0,  # not stated; LLaMA-Factory's default lora_dropout
        target_modules="all-linear",  # paper: LoRA "on all linear layers" (LLaMA-Factory lora_target: all)
        learning_rate=1e-4,  # paper: learning rate 1e-4
        schedule=Schedule.COSINE,  # paper: cosine learning-rate schedule
        warmup_ratio=0.1,  # paper: warm-up ratio 0.1
        weight_decay=0.0,  # not stated; LLaMA-Factory / transformers default
        max_grad_norm=1.0,  # not stated; LLaMA-Factory / transformers default
        batch_size=16,  # paper: batch size 16
        micro_batch_size=4,  # ours: 4 x 4 accumulation = 16 (fits a 24 GB GPU for 7B in bf16)
        epochs=3.0,  # paper: 3 epochs
        max_len=8192,  # ours: the exporter's per-sample cap (nbqa export --max-tokens), so nothing is cut
        dtype=Dtype.BFLOAT16,  # paper trains 7B models on GPUs; LLaMA-Factory's usual bf16
        logits_where_loss=True,  # ours: same loss, less compute
        group_by_length=True,  # ours: less padding
        save_steps=100,
        logging_steps=10,
    ),
    "cpu": SftConfig(
        lora_r=16,  # ours: a 270M model has little capacity to spare; rank 16 costs ~4M trainable parameters
        lora_alpha=32,  # 2 x rank, as LLaMA-Factory's default
        lora_dropout=0.0,  # one short epoch: nothing to regularise
        target_modules="all-linear",  # as the paper
        learning_rate=5e-4,  # ours: a tiny model and ~100 steps need a larger step than 1e-4 (usual LoRA range
        # for small models is 2e-4..1e-3; the first real run's loss curve is in docs/sft.md)
        schedule=Schedule.COSINE,  # as the paper
        warmup_ratio=0.05,  # ours: few steps; 10 % of ~100 steps would waste a tenth of the hour
        weight_decay=0.0,
        max_grad_norm=1.0,
        batch_size=8,  # ours: more optimizer steps in one hour than 16 would give
        micro_batch_size=2,  # ours: the measurement (~150 tokens/s at batch 2, sequence 640, full logits)
        epochs=1.0,
        max_len=1024,  # ours: synthesized samples are ~600-1000 tokens; a cap keeps every step bounded
        dtype=Dtype.FLOAT32,  # ours: full-precision weights and LoRA updates (a bf16 run is not measured here)
        logits_where_loss=True,
        group_by_length=True,
        save_steps=10,
        logging_steps=1,
    ),
}
DEFAULT_PROFILE = "cpu"


def profile(name: str) -> SftConfig:
    """The named profile; the error lists the known ones."""
    try:
        return PROFILES[name]
    except KeyError:
        raise SftConfigError(f"unknown SFT profile {name!r}; known: {', '.join(sorted(PROFILES))}") from None
