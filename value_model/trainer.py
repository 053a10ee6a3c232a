"""The value model on transformers' ``Trainer``: the same training stack as ``jupiter sft``.

``Trainer`` brings the optimizer step, the linear warm-up + decay schedule, gradient accumulation and clipping,
bf16 autocast on a GPU, checkpoints of the optimizer, scheduler and RNG state, and the resume into the middle of
an epoch. What the value model needs on top goes through ``Trainer``'s documented extension points:

- ``compute_loss``: the MSE between the predicted values and the targets, over a per-path batch or a tree pack
  (``value_model.batches``); a non-finite loss stops the run before it reaches the weights;
- ``create_optimizer``: ``Trainer``'s parameter groups (weight decay on matrices, not on biases or norms) split
  once more, so the head can have its own learning rate (``TrainConfig.head_learning_rate``);
- ``_save`` / ``_load_from_checkpoint``: a checkpoint holds only what trains (the LoRA adapter and the head,
  with the head's centering buffers), as ``ValueModel.save`` writes it, instead of a state dict of the whole
  module with its frozen backbone (about 1 GB for Gemma 3 270M);
- callbacks: the per-epoch record (held-out MSE and Spearman, tokens computed, seconds), stopping cleanly on
  SIGINT/SIGTERM after the current optimizer step with a checkpoint, and a progress bar that does not print
  every step's log line.

``Trainer`` takes a module whose ``config`` it may set (``use_cache``) and whose gradient checkpointing it
switches on; ``TrainingModule`` wraps ``ValueModel`` for that, so ``ValueModel.config`` stays its own.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from jupiter.sft.stopping import StopFlag, stop_callback
from value_model.config import TrainConfig
from value_model.metrics import mse, spearman
from value_model.model import ADAPTER_DIR, HEAD_FILE, ValueModel, pick_dtype

__all__ = ["EpochMetrics", "EpochStats", "RunLog", "TrainingModule", "StopFlag", "HISTORY_FILE",
           "training_arguments", "build_trainer"]

log = logging.getLogger("value_model.train")

#: The run's record so far, kept in each checkpoint (the per-epoch figures ``Trainer``'s state does not hold).
HISTORY_FILE = "value_history.json"


@dataclass(frozen=True)
class EpochMetrics:
    epoch: int  # 0: before training
    step: int  # optimizer steps done
    train_loss: float | None  # mean training MSE over the epoch (None for epoch 0)
    eval_mse: float | None  # None without a held-out split
    eval_spearman: float | None


@dataclass(frozen=True)
class EpochStats:
    """What an epoch computed (in this call: a resumed epoch counts from the resume)."""

    epoch: int
    batches: int
    packs: int  # batches that were tree packs
    samples: int
    tokens_computed: int  # tokens the backbone ran: a pack's trie, a per-path batch with its padding
    tokens_per_path: int  # the same samples' path lengths summed: what per-path training reads, without padding
    seconds: float  # training only (the held-out evaluation after it is not counted)


@dataclass
class RunLog:
    """Shared by the trainer (which adds each training batch) and the recording callback (epochs, steps)."""

    history: list[EpochMetrics] = field(default_factory=list)
    epochs: list[EpochStats] = field(default_factory=list)
    learning_rates: list[float] = field(default_factory=list)  # this call's optimizer steps
    grad_norms: list[float] = field(default_factory=list)
    _losses: list[float] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict)
    _started: float = 0.0

    def begin_epoch(self) -> None:
        self._losses = []
        self._counts = dict(batches=0, packs=0, samples=0, tokens_computed=0, tokens_per_path=0)
        self._started = time.perf_counter()

    def add_batch(self, loss: float, packed: bool, samples: int, computed: int, per_path: int) -> None:
        self._losses.append(loss)
        for key, value in (("batches", 1), ("packs", int(packed)), ("samples", samples),
                           ("tokens_computed", computed), ("tokens_per_path", per_path)):
            self._counts[key] = self._counts.get(key, 0) + value

    def end_epoch(self, epoch: int) -> tuple[float | None, EpochStats]:
        stats = EpochStats(epoch=epoch, seconds=round(time.perf_counter() - self._started, 3),
                           **{k: self._counts.get(k, 0) for k in ("batches", "packs", "samples", "tokens_computed",
                                                                  "tokens_per_path")})
        self.epochs = [e for e in self.epochs if e.epoch != epoch] + [stats]
        return (sum(self._losses) / len(self._losses) if self._losses else None), stats

    def record(self, metrics: EpochMetrics) -> None:
        # a run stopped mid-epoch recorded that epoch already: the figures after its resume replace those
        self.history = [h for h in self.history if h.epoch != metrics.epoch] + [metrics]

    def to_dict(self) -> dict[str, Any]:
        return {"history": [asdict(h) for h in self.history], "epochs": [asdict(e) for e in self.epochs]}

    @classmethod
    def from_checkpoint(cls, checkpoint: Path) -> RunLog:
        path = Path(checkpoint) / HISTORY_FILE
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        return cls(history=[EpochMetrics(**h) for h in data.get("history", [])],
                   epochs=[EpochStats(**e) for e in data.get("epochs", [])])


class TrainingModule(nn.Module):
    """``ValueModel`` as ``Trainer`` drives it: ``forward(input_ids, attention_mask)`` for a per-path batch or
    ``forward(packed=...)`` for a pack, and gradient checkpointing switched on the backbone."""

    def __init__(self, value: ValueModel) -> None:
        super().__init__()
        self.value = value

    def forward(self, input_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                packed: Any = None) -> torch.Tensor:
        if packed is not None:
            return self.value.forward_packed(packed.to(self.value.head.linear.weight.device))
        return self.value(input_ids, attention_mask)

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None, **kwargs: Any) -> None:
        # use_reentrant=False (from TrainingArguments) and input grads: without them checkpointed blocks give
        # LoRA no gradient
        self.value.lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=gradient_checkpointing_kwargs,
                                                    **kwargs)
        self.value.lm.enable_input_require_grads()


def training_dtype(config: TrainConfig, device: torch.device) -> torch.dtype:
    """The backbone's precision for this run: ``config.dtype``, or bf16 on a GPU and fp32 on a CPU."""
    return pick_dtype(device) if config.dtype is None else config.dtype.to_torch()


def training_arguments(config: TrainConfig, checkpoints: Path, device: torch.device, total_steps: int,
                       evaluate: bool, eval_on_start: bool) -> Any:
    """``TrainConfig`` as ``TrainingArguments`` (one item of ``value_model.batches`` per device batch)."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(checkpoints),
        per_device_train_batch_size=1,  # an item is a whole batch: batch_size paths, or one pack
        per_device_eval_batch_size=1,
        gradient_accumulation_steps=config.grad_accumulation,
        learning_rate=config.learning_rate,
        lr_scheduler_type="linear",  # linear warm-up from 0 over warmup_steps, then linear decay to 0
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        optim="adamw_torch",
        num_train_epochs=config.epochs,
        max_steps=total_steps,
        gradient_checkpointing=config.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False},
        eval_strategy="epoch" if evaluate else "no",
        eval_on_start=evaluate and eval_on_start,
        save_strategy="steps" if config.checkpoint_every else "epoch",
        save_steps=config.checkpoint_every or 500,
        save_total_limit=2,  # the newest, and the one before it should a save be cut short
        logging_strategy="steps",
        logging_steps=1,  # each step's learning rate and gradient norm reach RunLog through on_log
        seed=config.seed,
        data_seed=config.seed,
        train_sampling_strategy="sequential",  # TrainingBatches orders each epoch itself
        use_cpu=device.type == "cpu",
        bf16=training_dtype(config, device) == torch.bfloat16,
        dataloader_num_workers=0,
        dataloader_pin_memory=device.type == "cuda",
        remove_unused_columns=False,
        label_names=["labels"],
        report_to="none",
        disable_tqdm=not config.progress,
    )


def _epoch_index(state: Any) -> int:
    """The 1-based epoch ``Trainer``'s state is in (a run stopped mid-epoch: the epoch it stopped in)."""
    return max(1, math.ceil(round(float(state.epoch or 0.0), 6)))


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _callbacks(run_log: RunLog, flag: StopFlag, evaluate: bool, save_each_epoch: bool) -> list[Any]:
    from transformers import TrainerCallback

    class Record(TrainerCallback):
        """Per epoch: timing and token counts, the train loss, and (after the held-out evaluation) the metrics."""

        pending: tuple[int, int, float | None, EpochStats | None] | None = None

        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            run_log.begin_epoch()

        def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            epoch = _epoch_index(state)
            train_loss, stats = run_log.end_epoch(epoch)
            if flag.signal is not None:  # stopping: save at once, no evaluation of a partial epoch
                control.should_evaluate = False
                control.should_save = True
                return control
            self.pending = (epoch, state.global_step, train_loss, stats)
            if not evaluate:
                self._finish(None)
            if save_each_epoch:  # checkpoint_every saves by steps; every epoch's end is saved as well
                control.should_save = True
            return control

        def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict | None = None,
                        **kwargs: Any) -> Any:
            if state.global_step == 0 and self.pending is None:  # eval_on_start: epoch 0, before any step
                self.pending = (0, 0, None, None)
            self._finish(metrics or {})

        def _finish(self, metrics: dict | None) -> None:
            if self.pending is None:
                return
            epoch, step, train_loss, stats = self.pending
            self.pending = None
            metrics = metrics or {}
            record = EpochMetrics(epoch, step, train_loss, metrics.get("eval_mse"), metrics.get("eval_spearman"))
            run_log.record(record)
            log_epoch(record, stats)

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> Any:
            if logs and "grad_norm" in logs and "learning_rate" in logs:  # one optimizer step (logging_steps=1)
                run_log.grad_norms.append(float(logs["grad_norm"]))
                run_log.learning_rates.append(float(logs["learning_rate"]))

    return [Record(), stop_callback(flag)]


def log_epoch(record: EpochMetrics, stats: EpochStats | None) -> None:
    """The per-epoch log line (a warning, so that it shows at the CLI's default level)."""
    work = ""
    if stats is not None:
        share = stats.tokens_computed / stats.tokens_per_path if stats.tokens_per_path else 0.0
        work = (f"; {stats.tokens_computed} tokens computed ({stats.packs} packs of {stats.batches} batches) against "
                f"{stats.tokens_per_path} per path ({share:.0%}), {stats.seconds:.1f} s")
    log.warning("value epoch %d (step %d): train loss %s, held-out MSE %s, Spearman %s%s", record.epoch, record.step,
                _fmt(record.train_loss), _fmt(record.eval_mse), _fmt(record.eval_spearman), work)


def _quiet_progress() -> Any:
    from transformers import ProgressCallback

    class QuietProgress(ProgressCallback):
        """The tqdm bar without the line ``ProgressCallback`` writes (to stdout) for every log: the loss goes into
        the bar's postfix instead, and the CLI's stdout stays its one JSON line."""

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> Any:
            if self.training_bar is not None and logs and "loss" in logs:
                self.training_bar.set_postfix(loss=f"{logs['loss']:.4f}")

    return QuietProgress()


def _compute_metrics(prediction: Any) -> dict[str, float | None]:
    predictions = [float(v) for v in prediction.predictions.reshape(-1)]
    targets = [float(v) for v in prediction.label_ids.reshape(-1)]
    return {"mse": mse(predictions, targets), "spearman": spearman(predictions, targets) if len(targets) > 1 else None}


def build_trainer(value: ValueModel, config: TrainConfig, args: Any, train_set: Any, eval_set: Any, collator: Any,
                  run_log: RunLog, flag: StopFlag, output_dir: Path) -> Any:
    """The ``Trainer`` subclass for ``value`` (see the module docstring), with its callbacks."""
    from transformers import PrinterCallback, ProgressCallback, Trainer

    class ValueTrainer(Trainer):
        loss_is_scaled_for_ga = False  # compute_loss gives a per-batch mean: Trainer divides by the accumulation

        def compute_loss(self, model: nn.Module, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            packed = inputs.get("packed")
            values = model(input_ids=inputs.get("input_ids"), attention_mask=inputs.get("attention_mask"),
                           packed=packed)
            targets = inputs["labels"].to(values.device, torch.float32)
            loss = torch.nn.functional.mse_loss(values, targets)
            if not bool(torch.isfinite(loss.detach())):  # one NaN step would make every later value NaN
                raise FloatingPointError(
                    f"value training: non-finite loss at optimizer step {self.state.global_step + 1} (epoch "
                    f"{_epoch_index(self.state)}); its samples' values: {targets.tolist()}; the last checkpoint in "
                    f"{output_dir / 'checkpoints'} is intact")
            if model.training:
                if packed is not None:
                    computed, per_path = packed.tokens, int(packed.lengths.sum())
                else:
                    computed, per_path = int(inputs["input_ids"].numel()), int(inputs["attention_mask"].sum())
                run_log.add_batch(float(loss.detach()), packed is not None, len(targets), computed, per_path)
            return (loss, {"values": values}) if return_outputs else loss

        def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
            if self.optimizer is not None:
                return self.optimizer
            opt_model = self.model if model is None else model
            decay = set(self.get_decay_parameter_names(opt_model))
            head_lr = config.head_learning_rate or config.learning_rate
            groups: dict[tuple[bool, bool], list[nn.Parameter]] = {(h, d): [] for h in (False, True)
                                                                   for d in (True, False)}
            for name, parameter in opt_model.named_parameters():
                if parameter.requires_grad:
                    groups[(name.startswith("value.head."), name in decay)].append(parameter)
            # LoRA first: Trainer reports the first group's learning rate
            param_groups = [{"params": params, "weight_decay": config.weight_decay if decayed else 0.0,
                             **({"lr": head_lr} if head else {})}
                            for (head, decayed), params in groups.items() if params]
            optimizer_cls, kwargs = self.get_optimizer_cls_and_kwargs(self.args, opt_model)
            self.optimizer = optimizer_cls(param_groups, **kwargs)
            return self.optimizer

        def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
            from transformers.trainer import TRAINING_ARGS_NAME

            folder = Path(output_dir or self.args.output_dir)
            value.save(folder)  # adapter/, value_head.safetensors, value_config.json: the trainable weights only
            (folder / HISTORY_FILE).write_text(json.dumps(run_log.to_dict(), indent=1) + "\n", encoding="utf-8")
            torch.save(self.args, folder / TRAINING_ARGS_NAME)

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: nn.Module | None = None) -> None:
            load_trainable(value, Path(resume_from_checkpoint))

    trainer = ValueTrainer(model=TrainingModule(value), args=args, train_dataset=train_set, eval_dataset=eval_set,
                           data_collator=collator, compute_metrics=_compute_metrics if eval_set is not None else None,
                           callbacks=_callbacks(run_log, flag, eval_set is not None, bool(config.checkpoint_every)))
    trainer.remove_callback(PrinterCallback)  # prints every log to stdout
    trainer.remove_callback(ProgressCallback)
    if config.progress:
        trainer.add_callback(_quiet_progress())
    return trainer


def load_trainable(value: ValueModel, checkpoint: Path) -> None:
    """Puts a checkpoint's LoRA weights and head (with its centering buffers) into ``value``."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    result = set_peft_model_state_dict(value.peft_model,
                                       load_file(str(checkpoint / ADAPTER_DIR / "adapter_model.safetensors")))
    if getattr(result, "unexpected_keys", None):
        raise ValueError(f"{checkpoint}: adapter weights that this model does not have: {result.unexpected_keys[:5]}")
    head = load_file(str(checkpoint / HEAD_FILE))
    value.head.load_state_dict({k[len("value_head."):]: v for k, v in head.items()})
