"""LoRA fine-tuning of the policy on ShareGPT SFT data, with transformers' ``Trainer``.

Why ``Trainer`` and not TRL's ``SFTTrainer``: the samples must be tokenized by our own renderer (the prompts
the backends send, ``jupiter.sft.data``), and the loss computes the 262k-way output layer only where a label
counts; with both of those done here, SFTTrainer would add a dependency and nothing we use. ``Trainer`` gives
the rest: AdamW, warm-up + cosine schedule, gradient accumulation, length-grouped batches, a tqdm progress bar,
and checkpoints (optimizer, scheduler, RNG state, data position) that a rerun resumes from.

Output folder layout::

    DIR/adapter_config.json, adapter_model.safetensors   the LoRA adapter (peft ``save_pretrained``)
    DIR/training.json                                     command, profile, settings, data sha256, seed,
                                                          tokens seen, tokens/s, final loss
    DIR/run.json                                          what the run was started with (a resume must match)
    DIR/checkpoints/checkpoint-N/                         resumable checkpoints (the two latest)

A run stopped by Ctrl-C or SIGTERM finishes its optimizer step, saves a checkpoint and raises
``SftInterrupted``; the same command then resumes from it.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupiter.sft.config import Dtype, SftConfig
from jupiter.sft.data import IGNORE, EncodeReport, encode_all, file_sha256, read_sharegpt
from jupiter.sft.device import DeviceError, parse_device, pin_training_device
from jupiter.sft.stopping import StopFlag, stop_callback

__all__ = ["SftError", "SftInterrupted", "SftRequest", "SftResult", "resolve_base", "train_sft",
           "latest_checkpoint", "TRAINING_FILE", "RUN_FILE", "CHECKPOINTS"]

log = logging.getLogger(__name__)

TRAINING_FILE = "training.json"
RUN_FILE = "run.json"
CHECKPOINTS = "checkpoints"
#: What ``base_model_name_or_path`` says in an adapter trained on the embedded model (never a local path).
DEFAULT_BASE_NAME = "default"


class SftError(RuntimeError):
    """A training run that cannot start or go on; the message names the path or setting."""


class SftInterrupted(SftError):
    """Stopped by a signal after saving a checkpoint; rerunning the same command resumes."""


@dataclass(frozen=True)
class SftRequest:
    """One ``jupiter sft`` run.

    Attributes:
        data: the ShareGPT JSONL file.
        base: a Hugging Face model folder, or ``default`` for the embedded Gemma 3 270M.
        out: the output folder.
        config: training settings.
        profile: the profile name the settings came from (recorded).
        device: ``cpu`` or ``cuda`` (or ``cuda:N``).
        command: the command line, recorded in ``training.json``.
        fresh: refuse to resume (an existing checkpoint is an error instead).
        init_adapter: an adapter folder (an earlier ``jupiter sft`` output) whose LoRA weights this run starts
            from instead of fresh ones: a second stage on new data, e.g. the shipped default's (docs/sft.md).
    """

    data: Path
    base: str
    out: Path
    config: SftConfig
    profile: str = "cpu"
    device: str = "cpu"
    command: str = ""
    fresh: bool = False
    init_adapter: Path | None = None


@dataclass(frozen=True)
class SftResult:
    out: Path
    steps: int
    resumed_from: int | None
    tokens_seen: int
    tokens_per_second: float
    final_loss: float | None
    report: EncodeReport
    record: dict[str, Any] = field(default_factory=dict)


def resolve_base(base: str) -> Path:
    """``default`` → the cached embedded model (converted once); else a folder holding ``config.json``."""
    if base in ("default", "default-base"):
        from jupiter.default_model import ensure_default_model

        return ensure_default_model()
    path = Path(base).expanduser()
    if not path.exists():
        raise SftError(f"--base {base}: no such model folder")
    if not (path / "config.json").is_file():
        raise SftError(f"--base {base} is not a Hugging Face model folder (no config.json)")
    return path


def latest_checkpoint(out: Path) -> Path | None:
    """The newest ``checkpoint-N`` folder under ``out/checkpoints``, or None."""
    folder = Path(out) / CHECKPOINTS
    found = [p for p in folder.glob("checkpoint-*") if p.is_dir() and p.name.split("-")[-1].isdigit()
             and (p / "trainer_state.json").is_file()]
    return max(found, key=lambda p: int(p.name.split("-")[-1])) if found else None


def _run_identity(request: SftRequest, data_hash: str) -> dict[str, Any]:
    """What must not change between a run and its resume."""
    config = request.config.to_dict()
    for volatile in ("save_steps", "logging_steps"):
        config.pop(volatile)
    identity = {"data_sha256": data_hash, "base": request.base, "config": config}
    if request.init_adapter is not None:
        identity["init_adapter_sha256"] = file_sha256(Path(request.init_adapter) / ADAPTER_WEIGHTS)
    return identity


ADAPTER_WEIGHTS = "adapter_model.safetensors"


def check_init_adapter(folder: Path, config: SftConfig) -> dict[str, Any]:
    """The starting adapter's record (path, weights' sha256, its own training command); ``SftError`` when the
    folder is not a LoRA adapter or its rank differs from the settings' (the weights would not fit)."""
    folder = Path(folder)
    settings = folder / "adapter_config.json"
    if not settings.is_file() or not (folder / ADAPTER_WEIGHTS).is_file():
        raise SftError(f"--init-adapter {folder}: not an adapter folder (needs adapter_config.json and "
                       f"{ADAPTER_WEIGHTS})")
    rank = json.loads(settings.read_text(encoding="utf-8")).get("r")
    if rank != config.lora_r:
        raise SftError(f"--init-adapter {folder} has LoRA rank {rank}, the settings say {config.lora_r}: "
                       f"use --lora-r {rank}")
    earlier = folder / TRAINING_FILE
    before = json.loads(earlier.read_text(encoding="utf-8")) if earlier.is_file() else {}
    return {"path": str(folder), "sha256": file_sha256(folder / ADAPTER_WEIGHTS),
            "command": before.get("command"), "data_sha256": before.get("data", {}).get("sha256"),
            "tokens_seen": before.get("tokens_seen")}


def _check_out(request: SftRequest, data_hash: str) -> Path | None:
    """Checks the output folder before any work; returns the checkpoint to resume from (or None)."""
    out = request.out
    if out.exists() and not out.is_dir():
        raise SftError(f"--out {out} exists and is not a folder")
    if (out / TRAINING_FILE).is_file():
        raise SftError(f"--out {out} already holds a finished run ({TRAINING_FILE}); choose another folder")
    checkpoint = latest_checkpoint(out)
    if checkpoint is None:
        return None
    if request.fresh:
        raise SftError(f"--out {out} holds checkpoints ({checkpoint.name}); drop --no-resume to resume, or "
                       "choose another folder")
    try:
        started = json.loads((out / RUN_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise SftError(f"--out {out} has checkpoints but no readable {RUN_FILE}; cannot check that they "
                       "belong to this data and these settings") from None
    now = _run_identity(request, data_hash)
    different = sorted(k for k in now if started.get(k) != now[k])
    if "config" in different:
        before, after = started.get("config") or {}, now["config"]
        different.remove("config")
        different += [f"config.{k}" for k in sorted(after) if before.get(k) != after[k]]
    if different:
        raise SftError(f"--out {out} holds checkpoints of a different run (differs in: {', '.join(different)}); "
                       "use the same data and settings to resume, or choose another folder")
    return checkpoint


def _collate(pad_id: int) -> Callable[[Sequence[dict[str, list[int]]]], dict[str, Any]]:
    """Right-pads a batch to its longest sample (labels padded with IGNORE, attention mask 0)."""
    import torch
    from torch.nn.utils.rnn import pad_sequence

    def pad(sequences: list[list[int]], value: int) -> Any:
        return pad_sequence([torch.tensor(s, dtype=torch.long) for s in sequences], batch_first=True,
                            padding_value=value)  # pads on the right

    def collate(rows: Sequence[dict[str, list[int]]]) -> dict[str, Any]:
        ids = [r["input_ids"] for r in rows]
        return {"input_ids": pad(ids, pad_id), "labels": pad([r["labels"] for r in rows], IGNORE),
                "attention_mask": pad([[1] * len(s) for s in ids], 0)}

    return collate


def causal_lm_loss(model: Any, inputs: dict[str, Any], where_loss: bool, denominator: Any = None) -> Any:
    """Next-token cross-entropy over the positions whose label counts, summed and divided by ``denominator``
    (default: their number).

    ``where_loss``: run the backbone for hidden states and apply the output layer only at the positions that
    predict a labelled token (gathered first), instead of at every position. Same loss; with Gemma 3's 262k
    vocabulary the output layer is most of the compute and memory of a step.
    """
    import torch
    import torch.nn.functional as F

    labels = inputs["labels"]
    targets = labels[:, 1:]
    keep = targets != IGNORE
    if where_loss:
        causal = model.get_base_model() if hasattr(model, "get_base_model") else model
        hidden = causal.model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                              use_cache=False).last_hidden_state
        logits = causal.lm_head(hidden[:, :-1][keep])
        cap = getattr(causal.config, "final_logit_softcapping", None)
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
    else:
        logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                       use_cache=False).logits[:, :-1][keep]
    total = F.cross_entropy(logits.float(), targets[keep], reduction="sum")
    count = denominator if denominator is not None else keep.sum().clamp(min=1)
    return total / count


def _trainer_class() -> type:
    from transformers import Trainer

    class SftTrainer(Trainer):
        """``Trainer`` with our loss (``causal_lm_loss``), normalised over all loss tokens of an optimizer step."""

        def __init__(self, *args: Any, where_loss: bool, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.where_loss = where_loss
            # have Trainer count the loss tokens of the whole accumulated step and pass that count in, so a
            # long sample weighs by its tokens whatever micro-batch it falls in (as LLaMA-Factory does)
            self.model_accepts_loss_kwargs = True
            self.loss_tokens = 0

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            self.loss_tokens += int((inputs["labels"][:, 1:] != IGNORE).sum())
            loss = causal_lm_loss(model, inputs, self.where_loss, num_items_in_batch)
            return (loss, {}) if return_outputs else loss

    return SftTrainer


def build_model(base_dir: Path, config: SftConfig, device: str, init_adapter: Path | None = None) -> Any:
    """The base model with LoRA adapters (only they train): fresh ones, or ``init_adapter``'s weights; on
    ``device`` (``Trainer`` would move it there too; a caller without one, such as the throughput benchmark,
    needs it already there)."""
    import torch
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    dtype = config.dtype.to_torch()
    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=dtype)
    model.config.use_cache = False
    if init_adapter is not None:
        peft_model = PeftModel.from_pretrained(model, str(init_adapter), is_trainable=True)
        # the adapter names its base as the spec it was trained with ("default"); the trainer's checkpoint saves
        # would look that name up on the Hub, so it names the local folder until the final save renames it
        peft_model.peft_config["default"].base_model_name_or_path = str(base_dir)
        return peft_model.to(device)
    lora = LoraConfig(task_type="CAUSAL_LM", r=config.lora_r, lora_alpha=config.lora_alpha,
                      lora_dropout=config.lora_dropout, target_modules=config.target_modules)
    torch.manual_seed(config.seed)  # LoRA's A matrices are initialised from torch's RNG
    return get_peft_model(model, lora).to(device)


def _training_args(request: SftRequest) -> Any:
    from transformers import TrainingArguments

    config = request.config
    return TrainingArguments(
        output_dir=str(request.out / CHECKPOINTS),
        per_device_train_batch_size=config.micro_batch_size,
        gradient_accumulation_steps=config.grad_accumulation,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.schedule.value,
        warmup_steps=config.warmup_ratio,  # a float < 1 is a ratio of the total steps
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps or -1,
        logging_steps=config.logging_steps,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=2,
        seed=config.seed,
        data_seed=config.seed,
        use_cpu=parse_device(request.device)[0] == "cpu",
        bf16=config.dtype is Dtype.BFLOAT16 and parse_device(request.device)[0] != "cpu",
        train_sampling_strategy="group_by_length" if config.group_by_length else "random",
        include_num_input_tokens_seen="non_padding",
        remove_unused_columns=False,
        dataloader_num_workers=0,
        report_to="none",
        disable_tqdm=False,
    )


def train_sft(request: SftRequest) -> SftResult:
    """Run (or resume) one fine-tuning; returns what ``training.json`` records.

    Side effects: writes the output folder (see the module docstring); may convert the default model once.
    Raises ``SftError`` for bad paths or a mismatched resume, ``SftDataError`` for bad data,
    ``SftInterrupted`` after saving a checkpoint on SIGINT/SIGTERM.
    """
    import torch
    from transformers import AutoTokenizer

    request_out = Path(request.out)
    conversations = read_sharegpt(request.data)  # bad data fails before the model loads
    data_hash = file_sha256(request.data)
    started_from = (check_init_adapter(request.init_adapter, request.config)
                    if request.init_adapter is not None else None)
    resume_from = _check_out(request, data_hash)
    base_dir = resolve_base(request.base)
    try:
        device = pin_training_device(request.device)  # before anything starts CUDA (see jupiter.sft.device)
    except DeviceError as exc:
        raise SftError(str(exc)) from None
    if device != "cpu" and not torch.cuda.is_available():
        raise SftError(f"--device {request.device}: no CUDA device is available")
    request_out.mkdir(parents=True, exist_ok=True)
    if resume_from is None:
        (request_out / RUN_FILE).write_text(json.dumps(_run_identity(request, data_hash), indent=2) + "\n",
                                            encoding="utf-8")

    tokenizer = AutoTokenizer.from_pretrained(str(base_dir))
    samples, report = encode_all(conversations, tokenizer, None, request.config.max_len)
    if not samples:
        raise SftError(f"{request.data}: no sample keeps an assistant token within max_len "
                       f"{request.config.max_len}")
    log.info("sft data: %s", report.to_dict())
    model = build_model(base_dir, request.config, device, request.init_adapter)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    dataset = [{"input_ids": list(s.input_ids), "labels": list(s.labels)} for s in samples]
    flag = StopFlag("SFT")
    trainer = _trainer_class()(model=model, args=_training_args(request), train_dataset=dataset,
                               data_collator=_collate(pad_id), processing_class=tokenizer,
                               callbacks=[stop_callback(flag)], where_loss=request.config.logits_where_loss)
    if resume_from is not None:
        log.warning("resuming from %s", resume_from)
    restore = flag.install()
    started = time.perf_counter()
    try:
        output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    finally:
        restore()
    seconds = time.perf_counter() - started
    state = trainer.state
    session_tokens = state.num_input_tokens_seen - trainer._initial_num_input_tokens_seen
    if flag.signal is not None:
        raise SftInterrupted(f"stopped at step {state.global_step} by {signal.Signals(flag.signal).name}; "
                             f"checkpoint saved in {request_out / CHECKPOINTS}; rerun the same command to resume")
    losses = [entry["loss"] for entry in state.log_history if "loss" in entry]
    record = {
        "command": request.command,
        "profile": request.profile,
        "config": request.config.to_dict(),
        "base": request.base,
        "init_adapter": started_from,
        "data": {"file": Path(request.data).name, "sha256": data_hash, **report.to_dict()},
        "seed": request.config.seed,
        "device": request.device,
        "steps": state.global_step,
        "epochs": round(float(state.epoch or 0.0), 4),
        "resumed_from_step": _step_of(resume_from),
        "tokens_seen": int(state.num_input_tokens_seen),
        "session": {"seconds": round(seconds, 1), "tokens": int(session_tokens),
                    "loss_tokens": trainer.loss_tokens,
                    "tokens_per_second": round(session_tokens / seconds, 1) if seconds > 0 else None},
        "final_loss": losses[-1] if losses else None,
        "train_loss": round(float(output.training_loss), 6),
        "losses": losses,
        "peak_rss_mb": _peak_rss_mb(),
        **_gpu_record(device),
        "versions": _versions(),
    }
    model.peft_config["default"].base_model_name_or_path = (
        DEFAULT_BASE_NAME if request.base in ("default", "default-base") else request.base)
    # save_embedding_layers=False: the embeddings are frozen, and "auto" would look the base up on the Hub
    model.save_pretrained(str(request_out), save_embedding_layers=False)
    (request_out / TRAINING_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return SftResult(out=request_out, steps=state.global_step, resumed_from=record["resumed_from_step"],
                     tokens_seen=record["tokens_seen"], tokens_per_second=record["session"]["tokens_per_second"] or 0.0,
                     final_loss=record["final_loss"], report=report, record=record)


def _step_of(checkpoint: Path | None) -> int | None:
    return int(checkpoint.name.split("-")[-1]) if checkpoint is not None else None


def _peak_rss_mb() -> float:
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def _gpu_record(device: str) -> dict[str, Any]:
    """On a GPU: which one and the peak memory torch allocated on it (what a larger batch would have to fit)."""
    import torch

    if device == "cpu":
        return {}
    return {"gpu": torch.cuda.get_device_name(device),
            "peak_gpu_allocated_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1)}


def _versions() -> dict[str, str]:
    import peft
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__}
