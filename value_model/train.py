"""Training the value model: LoRA + head regression of Q on paths, with resumable checkpoints.

Loss: mean squared error between the predicted value and the sample's Q. AdamW over the LoRA and head
parameters only (the backbone stays frozen; weight decay on matrices, not on biases, as the reference code's
Hugging Face Trainer does), ``warmup_steps`` of linear warm-up then linear decay to 0 at the last step,
gradient accumulation, gradient clipping at ``max_grad_norm``, length-grouped batches with per-batch padding,
optional gradient checkpointing. Every epoch ends with an evaluation on the held-out split (MSE and
Spearman), logged and written to ``<out>/metrics.json``; the run before any step is evaluated too (epoch 0),
so the gain is visible.

Checkpoints (``<out>/checkpoints/step-N/``) hold the adapter, the head, the optimizer, the scheduler, the
RNG state and the position in the epoch; a rerun with the same output folder resumes from the latest one.
"""

from __future__ import annotations

import json
import logging
import math
import random
import re
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import torch

from value_model.config import ModelConfig, TrainConfig
from value_model.data import EncodedSample, collate, encode_samples, length_grouped_batches, sorted_batches
from value_model.extract import Sample
from value_model.metrics import mse, spearman
from value_model.model import ADAPTER_DIR, HEAD_FILE, ValueModel, load_tokenizer, pick_device

__all__ = ["EpochMetrics", "TrainResult", "Schedule", "training_schedule", "lr_factor", "split_samples",
           "evaluate_encoded", "train_value_model", "latest_checkpoint"]

log = logging.getLogger(__name__)

_STATE_FILE = "trainer_state.pt"
_CHECKPOINT = re.compile(r"^step-(\d+)$")


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int  # 0: before training
    step: int  # optimizer steps done
    train_loss: float | None  # mean training MSE over the epoch (None for epoch 0)
    eval_mse: float | None  # None without a held-out split
    eval_spearman: float | None


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


@dataclass(frozen=True)
class Schedule:
    """How many optimizer steps a run makes, and how many of them warm the learning rate up."""

    steps_per_epoch: int
    total_steps: int
    warmup_steps: int


def training_schedule(train_samples: int, config: TrainConfig) -> Schedule:
    """Optimizer steps for ``train_samples`` paths: ``ceil(ceil(n / batch_size) / grad_accumulation)`` per epoch
    (a last partial accumulation still steps), times ``epochs``, capped by ``max_steps``."""
    batches = math.ceil(train_samples / config.batch_size)
    per_epoch = math.ceil(batches / config.grad_accumulation)
    total = per_epoch * config.epochs
    if config.max_steps:
        total = min(total, config.max_steps)
    return Schedule(per_epoch, total, config.warmup_steps)


def lr_factor(step: int, warmup: int, total: int) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based): linear warm-up over ``warmup``
    steps ((step + 1) / warmup, so the first step already learns), then linear decay to 0 at ``total``.
    When ``warmup >= total`` (short runs) the rate only rises, as Hugging Face's linear schedule does."""
    if warmup and step < warmup:
        return (step + 1) / warmup
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
        ids, mask = collate([encoded[i].input_ids for i in batch], pad_id)
        values = model(ids.to(device), mask.to(device)).float().cpu().tolist()
        for i, v in zip(batch, values):
            predictions[i] = float(v)
    model.train(was_training)
    return predictions


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return None
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _CHECKPOINT.match(p.name))
             and (p / _STATE_FILE).is_file()]
    return max(found)[1] if found else None


def train_value_model(samples: Sequence[Sample], model_config: ModelConfig, config: TrainConfig,
                      output_dir: str | Path, resume: bool = True, model: ValueModel | None = None) -> TrainResult:
    """Train on ``samples`` and save the final model into ``output_dir`` (loadable by ``ValueScorer``).

    ``model``: train this (already built, on ``config.device``) model in place instead of a fresh one from
    ``model_config`` — to continue training a loaded model, or to inspect the weights afterwards.
    Side effects: writes checkpoints and ``metrics.json`` under ``output_dir``; uses ``config.device``.
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    device = pick_device(config.device)
    cuda = [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(config.seed)
        return _train(samples, model_config, config, output_dir, device, resume, model)


def _train(samples: Sequence[Sample], model_config: ModelConfig, config: TrainConfig, output_dir: Path,
           device: torch.device, resume: bool, model: ValueModel | None) -> TrainResult:
    from tqdm.auto import tqdm

    train_set, eval_set = split_samples(samples, config.eval_fraction, config.seed)
    tokenizer = load_tokenizer(model_config.backbone)
    pad_id = int(tokenizer.pad_token_id)
    train_enc = encode_samples(train_set, tokenizer, model_config)
    eval_enc = encode_samples(eval_set, tokenizer, model_config)
    lengths = [len(e.input_ids) for e in train_enc]
    log.info("value training: %d train / %d held-out samples, mean %.0f tokens, max %d", len(train_enc),
             len(eval_enc), sum(lengths) / max(1, len(lengths)), max(lengths, default=0))

    if model is None:
        model = ValueModel.create(model_config, device=device)
    if config.gradient_checkpointing:
        # use_reentrant=False and input grads: without them checkpointed blocks give LoRA no gradient.
        model.lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.lm.enable_input_require_grads()
    model.train()
    optimizer = _optimizer(model, config)
    schedule = training_schedule(len(train_enc), config)
    total_steps, warmup = schedule.total_steps, schedule.warmup_steps
    log.info("value training: %d optimizer steps (%d per epoch), %d warm-up", total_steps,
             schedule.steps_per_epoch, warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, warmup, total_steps))
    learning_rates: list[float] = []
    grad_norms: list[float] = []

    step, start_epoch, start_batch, history, resumed_from = 0, 0, 0, [], None
    checkpoint = latest_checkpoint(output_dir) if resume else None
    if checkpoint is not None:
        step, start_epoch, start_batch, history = _restore(checkpoint, model, optimizer, scheduler)
        resumed_from = step
        log.warning("resuming value training from %s (step %d, epoch %d)", checkpoint, step, start_epoch + 1)
    if not history:
        history.append(_epoch_metrics(model, eval_enc, config, pad_id, device, 0, 0, None))

    bar = tqdm(total=total_steps, initial=step, desc="value training", unit="step", disable=not config.progress)
    done = config.max_steps and step >= config.max_steps
    for epoch in range(start_epoch, config.epochs):
        if done:
            break
        rng = random.Random(f"{config.seed}:epoch:{epoch}")
        batches = length_grouped_batches(lengths, config.batch_size, rng, group=config.length_grouping)
        losses, pending, resume_at = [], 0, (epoch + 1, 0)
        first = start_batch if epoch == start_epoch else 0
        for index in range(first, len(batches)):
            ids, mask = collate([train_enc[i].input_ids for i in batches[index]], pad_id)
            targets = torch.tensor([train_enc[i].value for i in batches[index]], dtype=torch.float32, device=device)
            predictions = model(ids.to(device), mask.to(device))
            loss = torch.nn.functional.mse_loss(predictions, targets)
            if not bool(torch.isfinite(loss)):  # one NaN step would make every later value NaN
                raise FloatingPointError(
                    f"value training: non-finite loss at epoch {epoch + 1}, batch {index + 1} (optimizer step "
                    f"{step + 1}); its samples' values: {[train_enc[i].value for i in batches[index]]}; the "
                    f"last checkpoint in {output_dir / 'checkpoints'} is intact")
            (loss / config.grad_accumulation).backward()
            losses.append(float(loss.detach()))
            pending += 1
            if pending < config.grad_accumulation and index + 1 < len(batches):
                continue
            norm = torch.nn.utils.clip_grad_norm_([p for _, p in model.trainable_named_parameters()],
                                                  config.max_grad_norm)
            grad_norms.append(float(norm))
            learning_rates.append(float(optimizer.param_groups[0]["lr"]))
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            pending = 0
            step += 1
            bar.update(1)
            bar.set_postfix(loss=f"{sum(losses) / len(losses):.4f}")
            if config.max_steps and step >= config.max_steps:
                done = True
            if config.checkpoint_every and step % config.checkpoint_every == 0 and index + 1 < len(batches) \
                    and not done:
                _save_checkpoint(output_dir, model, optimizer, scheduler, step, epoch, index + 1, history)
            if done:
                if index + 1 < len(batches):
                    resume_at = (epoch, index + 1)  # stopped mid-epoch: a rerun goes on from the next batch
                break
        train_loss = sum(losses) / len(losses) if losses else None
        # a run stopped mid-epoch (max_steps) recorded this epoch already: the figures after it replace those
        history = [h for h in history if h.epoch != epoch + 1]
        history.append(_epoch_metrics(model, eval_enc, config, pad_id, device, epoch + 1, step, train_loss))
        _save_checkpoint(output_dir, model, optimizer, scheduler, step, *resume_at, history)
    bar.close()

    model.save(output_dir)
    metrics = {"history": [asdict(h) for h in history], "train_samples": len(train_enc),
               "eval_samples": len(eval_enc), "steps": step, "train_config": config.to_dict()}
    (output_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    return TrainResult(output_dir=output_dir, history=tuple(history), steps=step, train_samples=len(train_enc),
                       eval_samples=len(eval_enc), resumed_from=resumed_from,
                       learning_rates=tuple(learning_rates), grad_norms=tuple(grad_norms))


def _optimizer(model: ValueModel, config: TrainConfig) -> torch.optim.Optimizer:
    decay, no_decay, head_decay, head_no_decay = [], [], [], []
    for name, parameter in model.trainable_named_parameters():
        is_head = name.startswith("head.")
        if parameter.ndim < 2:  # biases (and norms): never decayed
            (head_no_decay if is_head else no_decay).append(parameter)
        else:
            (head_decay if is_head else decay).append(parameter)
    head_lr = config.head_learning_rate or config.learning_rate
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": no_decay, "weight_decay": 0.0},
              {"params": head_decay, "weight_decay": config.weight_decay, "lr": head_lr},
              {"params": head_no_decay, "weight_decay": 0.0, "lr": head_lr}]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=config.learning_rate)


def _epoch_metrics(model: ValueModel, eval_enc: Sequence[EncodedSample], config: TrainConfig, pad_id: int,
                   device: torch.device, epoch: int, step: int, train_loss: float | None) -> EpochMetrics:
    if not eval_enc:
        metrics = EpochMetrics(epoch, step, train_loss, None, None)
    else:
        predictions = evaluate_encoded(model, eval_enc, config.batch_size, pad_id, device)
        targets = [e.value for e in eval_enc]
        metrics = EpochMetrics(epoch, step, train_loss, mse(predictions, targets),
                               spearman(predictions, targets) if len(targets) > 1 else None)
    log.warning("value epoch %d (step %d): train loss %s, held-out MSE %s, Spearman %s", epoch, step,
                _fmt(metrics.train_loss), _fmt(metrics.eval_mse), _fmt(metrics.eval_spearman))
    return metrics


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _save_checkpoint(output_dir: Path, model: ValueModel, optimizer: torch.optim.Optimizer, scheduler,
                     step: int, epoch: int, batch: int, history: list[EpochMetrics]) -> Path:
    root = output_dir / "checkpoints"
    target = root / f"step-{step:06d}"
    work = root / f".tmp-step-{step:06d}"
    if work.exists():
        shutil.rmtree(work)
    model.save(work)
    torch.save({"step": step, "epoch": epoch, "batch": batch, "history": [asdict(h) for h in history],
                "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(), **_device_rng_state(model)}, work / _STATE_FILE)
    if target.exists():
        shutil.rmtree(target)
    work.rename(target)  # a checkpoint appears whole or not at all
    for old in root.iterdir():  # keep only the newest one: adapters are small, but optimizer state is not
        if old != target and _CHECKPOINT.match(old.name):
            shutil.rmtree(old, ignore_errors=True)
    return target


def _device_rng_state(model: ValueModel) -> dict[str, torch.Tensor]:
    """The GPU's RNG state when the model trains on one: dropout there draws from it, not from the CPU RNG, so
    a resumed run without it would draw other dropout masks than the run it continues."""
    device = model.head.linear.weight.device
    return {"cuda_rng": torch.cuda.get_rng_state(device)} if device.type == "cuda" else {}


def _restore_device_rng_state(model: ValueModel, state: dict) -> None:
    """Puts back ``_device_rng_state``'s GPU RNG state (nothing for a CPU model, or a checkpoint written on CPU)."""
    device = model.head.linear.weight.device
    if device.type == "cuda" and "cuda_rng" in state:
        torch.cuda.set_rng_state(state["cuda_rng"].cpu(), device)


def _restore(checkpoint: Path, model: ValueModel, optimizer: torch.optim.Optimizer, scheduler
             ) -> tuple[int, int, int, list[EpochMetrics]]:
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    set_peft_model_state_dict(model.peft_model, load_file(str(checkpoint / ADAPTER_DIR / "adapter_model.safetensors")))
    head = load_file(str(checkpoint / HEAD_FILE))
    model.head.load_state_dict({k[len("value_head."):]: v for k, v in head.items()})
    state = torch.load(checkpoint / _STATE_FILE, map_location="cpu", weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    _restore_device_rng_state(model, state)
    history = [EpochMetrics(**h) for h in state["history"]]
    return int(state["step"]), int(state["epoch"]), int(state["batch"]), history
