"""``jupiter sft``: LoRA fine-tuning of the policy on ShareGPT SFT data, and merging an adapter.

    jupiter sft SFT.jsonl --base default --out DIR [--profile cpu|paper] [--merge]
    jupiter sft merge ADAPTER_DIR --out MERGED_DIR [--base MODEL]

The data is what ``jupiter nbqa export`` writes (``sft_sharegpt.jsonl``). The output folder gets the adapter,
``training.json`` and resumable checkpoints: rerunning the same command after a crash or Ctrl-C resumes from
the latest checkpoint. ``--merge`` also writes ``DIR/merged`` (a plain Hugging Face folder). Either folder
loads as a policy: ``--llm hf:DIR`` (an adapter is merged into a cache on first use) or ``--llm hf:DIR/merged``.
Heavy imports (torch, transformers, peft) happen inside the handlers, so ``--help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from jupiter.commands.helpformat import HelpFormatter
from jupiter.console_log import EXIT_INTERRUPTED
from jupiter.output_paths import check_output_folder
from jupiter.task import TaskError

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from jupiter.sft.config import DEFAULT_PROFILE, PROFILES, Dtype, Schedule

    parser = subparsers.add_parser("sft", help="LoRA fine-tuning of the policy on SFT data; merge an adapter",
                                   description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("inputs", nargs="+", metavar="SFT.jsonl",
                        help="the ShareGPT SFT file; or 'merge ADAPTER_DIR' to merge an adapter")
    parser.add_argument("--base", default=None,
                        help="base model: a Hugging Face folder or 'default' (the embedded Gemma 3 270M); "
                             "training default: 'default'; merge default: the base the adapter records")
    parser.add_argument("--out", type=Path, help="output folder (required)")
    parser.add_argument("--profile", default=DEFAULT_PROFILE, choices=sorted(PROFILES),
                        help="settings: 'cpu' (the embedded model on a small CPU) or 'paper' (the Jupiter "
                             "paper's LLaMA-Factory values); the flags below override it")
    parser.add_argument("--print-config", action="store_true", help="print the resolved settings as JSON and exit")
    parser.add_argument("--epochs", type=float, default=None)
    parser.add_argument("--max-steps", type=int, default=None, help="stop after this many optimizer steps")
    parser.add_argument("--batch-size", type=int, default=None, help="samples per optimizer step")
    parser.add_argument("--micro-batch-size", type=int, default=None, help="samples per forward pass")
    parser.add_argument("--lr", type=float, default=None, dest="learning_rate", help="peak learning rate")
    parser.add_argument("--schedule", default=None, choices=[s.value for s in Schedule])
    parser.add_argument("--warmup-ratio", type=float, default=None)
    parser.add_argument("--weight-decay", type=float, default=None)
    parser.add_argument("--lora-r", type=int, default=None)
    parser.add_argument("--lora-alpha", type=int, default=None)
    parser.add_argument("--lora-dropout", type=float, default=None)
    parser.add_argument("--max-len", type=int, default=None, help="token cap of one sample (longer: cut at the end)")
    parser.add_argument("--dtype", default=None, choices=[d.value for d in Dtype])
    parser.add_argument("--save-steps", type=int, default=None, help="optimizer steps between checkpoints")
    parser.add_argument("--logging-steps", type=int, default=None)
    parser.add_argument("--full-logits", action="store_true",
                        help="compute the output layer at every position (slower; for comparison)")
    parser.add_argument("--no-group-by-length", action="store_true", help="random batches instead of "
                        "length-grouped ones")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    parser.add_argument("--no-resume", action="store_true",
                        help="refuse to resume: an output folder with checkpoints is an error")
    parser.add_argument("--merge", action="store_true", help="after training, also write DIR/merged")
    parser.add_argument("--init-adapter", type=Path, default=None, metavar="ADAPTER_DIR",
                        help="start from this adapter's LoRA weights (a second stage on new data) instead of "
                             "fresh ones")
    parser.set_defaults(handler=run, interrupted_note="rerun the same command to resume from the last checkpoint")


def _config(args: argparse.Namespace):  # -> SftConfig
    from jupiter.sft.config import SftConfigError, profile

    overrides = {name: getattr(args, name) for name in (
        "epochs", "max_steps", "batch_size", "micro_batch_size", "learning_rate", "schedule", "warmup_ratio",
        "weight_decay", "lora_r", "lora_alpha", "lora_dropout", "max_len", "dtype", "save_steps",
        "logging_steps", "seed")}
    if args.full_logits:
        overrides["logits_where_loss"] = False
    if args.no_group_by_length:
        overrides["group_by_length"] = False
    try:
        return profile(args.profile).with_overrides(overrides)
    except SftConfigError as exc:
        raise TaskError(str(exc)) from None


#: flags that change the training, in the order the recorded command lists them
_RECORDED = ("profile", "epochs", "max_steps", "batch_size", "micro_batch_size", "learning_rate", "schedule",
             "warmup_ratio", "weight_decay", "lora_r", "lora_alpha", "lora_dropout", "max_len", "dtype", "seed",
             "device", "init_adapter")


def _command_line(args: argparse.Namespace, data: Path) -> str:
    """The command that reproduces this run: data, base, out and every setting given (recorded in
    ``training.json``; built from the parsed flags, so it is the same however the command was invoked)."""
    parts = ["jupiter", "sft", str(data), "--base", args.base or "default", "--out", str(args.out)]
    for name in _RECORDED:
        value = getattr(args, name)
        if value is not None and not (name == "device" and value == "cpu"):
            flag = "--lr" if name == "learning_rate" else "--" + name.replace("_", "-")
            parts += [flag, str(value)]
    parts += [flag for flag, on in (("--full-logits", args.full_logits),
                                    ("--no-group-by-length", args.no_group_by_length)) if on]
    return " ".join(shlex.quote(p) for p in parts)


def run(args: argparse.Namespace) -> int:
    if args.inputs[0] == "merge":
        return _run_merge(args)
    if len(args.inputs) != 1:
        raise TaskError(f"jupiter sft takes one SFT file, got {len(args.inputs)}: {' '.join(args.inputs)}")
    config = _config(args)
    if args.print_config:
        print(json.dumps({"profile": args.profile, **config.to_dict()}, indent=2))
        return 0
    if args.out is None:
        raise TaskError("jupiter sft: --out DIR is required")
    data = Path(args.inputs[0])
    if not data.is_file():
        raise TaskError(f"SFT data file {data} does not exist" if not data.exists() else f"{data} is not a file")
    check_output_folder(args.out)
    if args.merge:
        check_output_folder(args.out / "merged", "--merge (DIR/merged)")
    if args.threads is not None:
        import torch

        torch.set_num_threads(args.threads)
    from jupiter.sft.data import SftDataError
    from jupiter.sft.train import SftError, SftInterrupted, SftRequest, train_sft

    request = SftRequest(data=data, base=args.base or "default", out=args.out, config=config,
                         profile=args.profile, device=args.device, fresh=args.no_resume,
                         command=_command_line(args, data), init_adapter=args.init_adapter)
    try:
        result = train_sft(request)
    except SftInterrupted as exc:
        print(f"jupiter: interrupted; {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (SftError, SftDataError) as exc:
        raise TaskError(str(exc)) from None
    summary = {"out": str(result.out), "steps": result.steps, "resumed_from": result.resumed_from,
               "tokens_seen": result.tokens_seen, "tokens_per_second": result.tokens_per_second,
               "final_loss": result.final_loss, "data": result.report.to_dict()}
    if args.merge:
        from jupiter.sft.merge import merge_adapter
        from jupiter.sft.train import resolve_base

        summary["merged"] = str(merge_adapter(result.out, resolve_base(request.base), args.out / "merged"))
    print(json.dumps(summary, indent=2))
    return 0


def _run_merge(args: argparse.Namespace) -> int:
    if len(args.inputs) != 2:
        raise TaskError("usage: jupiter sft merge ADAPTER_DIR --out MERGED_DIR [--base MODEL]")
    if args.out is None:
        raise TaskError("jupiter sft merge: --out MERGED_DIR is required")
    adapter = Path(args.inputs[1])
    from jupiter.llm.model_dirs import ModelDirError, adapter_base
    from jupiter.sft.merge import MergeError, is_adapter_dir, merge_adapter
    from jupiter.sft.train import SftError, resolve_base

    if not is_adapter_dir(adapter):
        raise TaskError(f"{adapter} is not a LoRA adapter folder (no adapter_config.json)")
    check_output_folder(args.out)
    try:
        base = resolve_base(args.base) if args.base else adapter_base(adapter)
        merged = merge_adapter(adapter, base, args.out)
    except (MergeError, SftError, ModelDirError) as exc:
        raise TaskError(str(exc)) from None
    print(json.dumps({"merged": str(merged), "base": str(base), "adapter": str(adapter)}, indent=2))
    return 0
