"""Training the value model: LoRA + head regression of Q on paths, on transformers' ``Trainer``.

Loss: mean squared error between the predicted value and the sample's Q. AdamW over the LoRA and head
parameters only (the backbone stays frozen; weight decay on matrices, not on biases, by ``Trainer``'s
parameter groups), ``warmup_steps`` of linear warm-up from 0 then linear decay to 0 at the last step
(``Trainer``'s ``linear`` schedule, the reference code's), gradient accumulation, gradient clipping at
``max_grad_norm``, optional gradient checkpointing, bf16 autocast on a GPU. Batches are tree packs where the
samples came from trees (``value_model.batches``: each token a tree's paths share computed once) and
length-grouped per-path batches with per-batch padding otherwise. Every epoch ends with an evaluation on the
held-out split (MSE and Spearman), logged and written to ``<out>/metrics.json`` with each epoch's tokens
computed (packed) against per path and its seconds; the run before any step is evaluated too (epoch 0), so
the gain is visible.

Checkpoints (``<out>/checkpoints/checkpoint-N/``, the two newest) hold the adapter and the head (not the
frozen backbone), ``Trainer``'s optimizer, scheduler, RNG and trainer state, and the run's record so far; a
rerun with the same output folder resumes from the newest one. SIGINT/SIGTERM end the run after the current
optimizer step with a checkpoint (``TrainingInterrupted``). How each ``TrainConfig`` field maps onto
``TrainingArguments``: ``value_model.trainer.training_arguments``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import signal
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from jupiter.torch_device import DeviceError, parse_device
from value_model.batches import EvalBatches, TrainingBatches, collate, plan_batches, tree_of
from value_model.config import ModelConfig, TrainConfig
from value_model.data import EncodedSample, encode_samples, sorted_batches
from value_model.data import collate as pad_batch
from value_model.extract import Sample
from value_model.model import ModelLoadError, ValueModel, load_tokenizer, resolve_backbone
from value_model.trainer import (
    EpochMetrics,
    EpochStats,
    RunLog,
    StopFlag,
    build_trainer,
    load_trainable,
    log_epoch,
    training_arguments,
    training_dtype,
)

__all__ = ["EpochMetrics", "EpochStats", "TrainResult", "TrainingInterrupted", "Schedule", "training_schedule",
           "lr_factor", "split_samples", "evaluate_encoded", "train_value_model", "latest_checkpoint"]

log = logging.getLogger(__name__)

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


class TrainingInterrupted(RuntimeError):
    """Stopped by SIGINT/SIGTERM after saving a checkpoint; the same call (or command) again resumes."""


@dataclass(frozen=True)
class TrainResult:
    output_dir: Path
    history: tuple[EpochMetrics, ...]
    steps: int
    train_samples: int
    eval_samples: int
    resumed_from: int | None  # optimizer step of the checkpoint resumed from
    learning_rates: tuple[float, ...] = ()  # LoRA learning rate used at each optimizer step of this call
    grad_norms: tuple[float, ...] = ()  # gradient norm before clipping at each optimizer step of this call
    epochs: tuple[EpochStats, ...] = ()  # per epoch: batches, packs, tokens computed and per path, seconds


@dataclass(frozen=True)
class Schedule:
    """How many optimizer steps a run makes, and how many of them warm the learning rate up."""

    steps_per_epoch: int
    total_steps: int
    warmup_steps: int


def training_schedule(train_samples: int, config: TrainConfig, batches: int | None = None) -> Schedule:
    """Optimizer steps for ``train_samples`` paths in per-path batches: ``ceil(ceil(n / batch_size) /
    grad_accumulation)`` per epoch (a last partial accumulation still steps), times ``epochs``, capped by
    ``max_steps``. ``batches``: the number of batches per epoch when it is not ``ceil(n / batch_size)`` (with
    tree packing, ``len`` of the run's ``TrainingBatches``)."""
    if batches is None:
        batches = math.ceil(train_samples / config.batch_size)
    per_epoch = math.ceil(batches / config.grad_accumulation)
    total = per_epoch * config.epochs
    if config.max_steps:
        total = min(total, config.max_steps)
    return Schedule(per_epoch, total, config.warmup_steps)


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based), as ``Trainer``'s ``linear``
    schedule (``get_linear_schedule_with_warmup``) computes it: ``step / warmup`` during the warm-up (0 at the
    first step), then linear decay to 0 at ``total``."""
    if step < warmup:
        return step / max(1, warmup)
    return max(0.0, (total - step) / max(1, total - warmup))


def split_samples(samples: Sequence[Sample], eval_fraction: float, seed: int) -> tuple[list[Sample], list[Sample]]:
    """Seeded split into (train, held-out). At least 2 held-out samples when a fraction is asked for."""
    order = list(range(len(samples)))
    random.Random(f"split:{seed}").shuffle(order)
    n_eval = 0 if eval_fraction == 0 else max(2, round(eval_fraction * len(samples)))
    if n_eval >= len(samples):
        raise ValueError(f"TrainConfig.eval_fraction: {len(samples)} samples are too few to hold out {n_eval}")
    held = sorted(order[:n_eval])
    train = sorted(order[n_eval:])
    return [samples[i] for i in train], [samples[i] for i in held]


@torch.inference_mode()
def evaluate_encoded(model: ValueModel, encoded: Sequence[EncodedSample], batch_size: int, pad_id: int,
                     device: torch.device) -> list[float]:
    """Predictions for encoded samples, in input order (eval mode, length-sorted batches)."""
    was_training = model.training
    model.eval()
    predictions = [0.0] * len(encoded)
    for batch in sorted_batches([len(e.input_ids) for e in encoded], batch_size):
        ids, mask = pad_batch([encoded[i].input_ids for i in batch], pad_id)
        values = model(ids.to(device), mask.to(device)).float().cpu().tolist()
        for i, v in zip(batch, values):
            predictions[i] = float(v)
    model.train(was_training)
    return predictions


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` under ``output_dir/checkpoints`` (its ``trainer_state.json``, written
    last, is there), or None."""
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _CHECKPOINT.match(p.name))
             and (p / "trainer_state.json").is_file()]
    return max(found)[1] if found else None


def training_device(requested: str | None) -> torch.device:
    """The device ``Trainer`` will train on. On a GPU, the process is first restricted to the one asked for
    (``jupiter.sft.device.pin_training_device``): off the CPU ``Trainer`` always trains on ``cuda:0``, and over
    every visible GPU through ``DataParallel`` when it sees several."""
    from jupiter.sft.device import pin_training_device

    try:
        if requested is not None and parse_device(requested)[0] == "cpu":
            return torch.device("cpu")
        pinned = pin_training_device(requested or "cuda")
    except DeviceError as exc:
        raise ModelLoadError(str(exc)) from None
    if not torch.cuda.is_available():
        if requested is None:
            return torch.device("cpu")
        raise ModelLoadError(f"device {requested}: no such CUDA device (0 available)")
    return torch.device(pinned)


def train_value_model(samples: Sequence[Sample], model_config: ModelConfig, config: TrainConfig,
                      output_dir: str | Path, resume: bool = True, model: ValueModel | None = None) -> TrainResult:
    """Train on ``samples`` and save the final model into ``output_dir`` (loadable by ``ValueScorer``).

    ``model``: train this (already built) model in place instead of a fresh one from ``model_config`` — to
    continue training a loaded model, or to inspect the weights afterwards; ``Trainer`` moves it to
    ``config.device``. Side effects: writes checkpoints and ``metrics.json`` under ``output_dir``; uses
    ``config.device``; the caller's random states (Python, NumPy, torch) are left as they were. Raises
    ``TrainingInterrupted`` after saving a checkpoint when stopped by SIGINT/SIGTERM.
    """
    import numpy as np

    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    device = training_device(config.device)
    cuda = [device.index or 0] if device.type == "cuda" else []
    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=cuda):  # Trainer seeds every RNG of the process
            torch.manual_seed(config.seed)
            return _train(samples, model_config, config, output_dir, device, resume, model)
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)


def _train(samples: Sequence[Sample], model_config: ModelConfig, config: TrainConfig, output_dir: Path,
           device: torch.device, resume: bool, model: ValueModel | None) -> TrainResult:
    train_samples, eval_samples = split_samples(samples, config.eval_fraction, config.seed)
    tokenizer = load_tokenizer(resolve_backbone(model_config.backbone))
    train_enc = encode_samples(train_samples, tokenizer, model_config)
    eval_enc = encode_samples(eval_samples, tokenizer, model_config)
    plan = plan_batches(train_enc, [tree_of(s) for s in train_samples], config.pack_tokens, config.packing)
    train_set = TrainingBatches(train_enc, plan, config.batch_size, config.seed, config.length_grouping)
    lengths = [len(e.input_ids) for e in train_enc]
    log.info("value training: %d train / %d held-out samples, mean %.0f tokens, max %d; %d packs of %d samples "
             "(budget %d tokens), %d samples per path (%d cut by the token budget)", len(train_enc), len(eval_enc),
             sum(lengths) / max(1, len(lengths)), max(lengths, default=0), len(plan.packs), plan.packed_samples,
             config.pack_tokens, len(plan.per_path), sum(e.truncated for e in train_enc))
    schedule = training_schedule(len(train_enc), config, batches=len(train_set))
    log.info("value training: %d optimizer steps (%d per epoch), %d warm-up", schedule.total_steps,
             schedule.steps_per_epoch, schedule.warmup_steps)

    if model is None:
        model = ValueModel.create(model_config, device=device, dtype=training_dtype(config, device))
    checkpoint = latest_checkpoint(output_dir) if resume else None
    run_log = RunLog.from_checkpoint(checkpoint) if checkpoint is not None else RunLog()
    resumed_from = _checkpoint_step(checkpoint) if checkpoint is not None else None
    if checkpoint is not None:
        log.warning("resuming value training from %s (step %d)", checkpoint, resumed_from)
    evaluate = bool(eval_enc)
    args = training_arguments(config, output_dir / "checkpoints", device, schedule.total_steps, evaluate,
                              eval_on_start=checkpoint is None)
    flag = StopFlag("value training")
    trainer = build_trainer(model, config, args, train_set, EvalBatches(eval_enc, config.batch_size) if evaluate
                            else None, collate(int(tokenizer.pad_token_id)), run_log, flag, output_dir)
    if checkpoint is None and not evaluate:
        run_log.record(EpochMetrics(0, 0, None, None, None))
        log_epoch(run_log.history[-1], None)

    steps = resumed_from or 0
    if checkpoint is not None and steps >= schedule.total_steps:
        load_trainable(model, checkpoint)  # nothing left to train: the checkpoint's weights are the result
    else:
        restore = flag.install()
        try:
            steps = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None).global_step
        finally:
            restore()
        if flag.signal is not None:
            raise TrainingInterrupted(f"value training stopped at step {steps} by {signal.Signals(flag.signal).name}; "
                                      f"checkpoint saved in {output_dir / 'checkpoints'}; run it again to resume")
    model.eval()
    model.save(output_dir)
    metrics = {"history": [asdict(h) for h in run_log.history], "train_samples": len(train_enc),
               "eval_samples": len(eval_enc), "steps": steps, "train_config": config.to_dict(),
               "batches": {"packs": len(plan.packs), "packed_samples": plan.packed_samples,
                           "per_path_samples": len(plan.per_path),
                           "truncated_samples": sum(e.truncated for e in train_enc),
                           "batches_per_epoch": len(train_set)},
               "epochs": [asdict(e) for e in run_log.epochs]}
    (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return TrainResult(output_dir=output_dir, history=tuple(run_log.history), steps=steps,
                       train_samples=len(train_enc), eval_samples=len(eval_enc), resumed_from=resumed_from,
                       learning_rates=tuple(run_log.learning_rates), grad_norms=tuple(run_log.grad_norms),
                       epochs=tuple(run_log.epochs))


def _checkpoint_step(checkpoint: Path) -> int:
    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    return int(state["global_step"])
