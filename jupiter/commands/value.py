"""``jupiter value extract|train|score|rank|auc``: build a value-model training set from trees, train, score states,
and measure how well a model orders the nodes of DABench trees it never saw.

    jupiter value extract TREES... -o train.jsonl
    jupiter value train train.jsonl --base default --out DIR
    jupiter value score DIR states.jsonl [-o scores.jsonl]
    jupiter value rank DIR RUN... [--json] [--nodes-out nodes.jsonl]
    jupiter value auc nodes.jsonl... [--json]

Heavy imports (torch, transformers, peft) happen inside the handlers, so ``jupiter value extract`` and
``--help`` stay fast. Bad input exits with code 2 and one line naming the file or field.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from jupiter.commands.helpformat import HelpFormatter
from jupiter.commands.search_args import flag_message
from jupiter.output_paths import check_output_file, check_output_folder
from jupiter.task import read_jsonl
from value_model.config import (
    DEFAULT_TRAIN_PROFILE,
    TRAIN_PROFILES,
    TRAIN_SOURCES,
    ConfigError,
    ModelConfig,
    train_profile,
)
from value_model.extract import ExtractConfig, ExtractError, extract_samples, read_samples, write_samples

if TYPE_CHECKING:
    from benchmarks.value_rank import KindReport

__all__ = ["add_parser"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("value", help="value model: extract training data, train, score states",
                                   description=__doc__, formatter_class=HelpFormatter)
    inner = parser.add_subparsers(dest="value_command", metavar="ACTION")

    ext = inner.add_parser("extract", help="tree files → JSONL training samples (messages, text, value)",
                           formatter_class=HelpFormatter)
    ext.add_argument("trees", nargs="+", type=Path, help="tree files (ours or the paper's; .json or .jsonl)")
    ext.add_argument("-o", "--output", type=Path, required=True, help="where to write the samples (JSONL)")
    ext.add_argument("--seed", type=int, default=0)
    ext.add_argument("--max-correct", type=int, default=4, help="correct terminals sampled per tree")
    ext.add_argument("--max-wrong", type=int, default=4, help="wrong terminals sampled per tree")
    ext.add_argument("--max-wrong-if-no-correct", type=int, default=2)
    ext.add_argument("--template", default="gemma", choices=["gemma", "chatml"], help="how paths are rendered")
    ext.add_argument("--target", default="q", choices=["q", "tree-centred"],
                     help="each node's label: its Q (the paper) or its Q minus the mean of its tree's samples")
    ext.set_defaults(handler=run_extract)

    tr = inner.add_parser("train", help="train LoRA + value head on extracted samples",
                          formatter_class=HelpFormatter)
    tr.add_argument("samples", type=Path, nargs="?", help="JSONL from 'jupiter value extract'")
    tr.add_argument("--base", default="default",
                    help="backbone: 'default' (the fine-tuned policy, as the paper), 'default-base', a Hugging Face "
                         "or adapter folder")
    tr.add_argument("--out", type=Path, help="output folder (model, checkpoints, metrics.json); required to train")

    tr.add_argument("--profile", default=DEFAULT_TRAIN_PROFILE, choices=sorted(TRAIN_PROFILES),
                    help="training settings: 'paper' (3 epochs, batch 4, lr 1e-4, 100 warm-up steps, weight "
                         "decay 0.01, clipping 1.0) or 'cpu-small' (tiny CPU runs); the flags below override it")
    tr.add_argument("--print-config", action="store_true",
                    help="print the resolved training configuration as JSON and exit")
    paper = TRAIN_PROFILES[DEFAULT_TRAIN_PROFILE]

    def per_profile(what: str, field: str) -> str:
        return f"{what} (profile default; paper: {getattr(paper, field)})"

    tr.add_argument("--epochs", type=int, default=None, help=per_profile("passes over the samples", "epochs"))
    tr.add_argument("--batch-size", type=int, default=None, help=per_profile("paths per forward pass", "batch_size"))
    tr.add_argument("--grad-accum", type=int, default=None,
                    help=per_profile("forward passes per optimizer step", "grad_accumulation"))
    tr.add_argument("--lr", type=float, default=None, help=per_profile("peak learning rate", "learning_rate"))
    tr.add_argument("--head-lr", type=float, default=None, help="value head learning rate (default: --lr)")
    tr.add_argument("--weight-decay", type=float, default=None, help=per_profile("AdamW weight decay", "weight_decay"))
    tr.add_argument("--warmup-steps", type=int, default=None,
                    help=per_profile("optimizer steps of linear warm-up", "warmup_steps"))
    tr.add_argument("--max-grad-norm", type=float, default=None,
                    help=per_profile("gradient clipping norm", "max_grad_norm"))
    tr.add_argument("--eval-fraction", type=float, default=None,
                    help=per_profile("held-out share of the samples", "eval_fraction"))
    tr.add_argument("--max-tokens", type=int, default=8000, help="token budget of one path")
    tr.add_argument("--lora-r", type=int, default=8)
    tr.add_argument("--lora-alpha", type=int, default=32)
    tr.add_argument("--lora-dropout", type=float, default=0.1)
    tr.add_argument("--template", default="gemma", choices=["gemma", "chatml"])
    tr.add_argument("--checkpoint-every", type=int, default=None, help="optimizer steps between checkpoints")
    tr.add_argument("--max-steps", type=int, default=None)
    tr.add_argument("--no-gradient-checkpointing", action="store_true")
    tr.add_argument("--no-packing", action="store_true",
                    help="train every path on its own instead of a tree's paths as packs (each shared token once)")
    tr.add_argument("--pack-tokens", type=int, default=None,
                    help=per_profile("token budget of one tree pack", "pack_tokens"))
    tr.add_argument("--no-resume", action="store_true", help="start over even if checkpoints exist")
    tr.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)")
    tr.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                    help="backbone precision (default: bfloat16 on a GPU, float32 on a CPU)")
    tr.add_argument("--seed", type=int, default=None)
    tr.set_defaults(handler=run_train, interrupted_note="rerun the same command to resume from the last checkpoint")

    sc = inner.add_parser("score", help="score states (JSONL of {messages: [...]}) with a trained model",
                          formatter_class=HelpFormatter)
    sc.add_argument("model", type=Path, help="a folder written by 'jupiter value train'")
    sc.add_argument("states", type=Path, help='JSONL: one {"messages": [...]} per line (other keys are echoed)')
    sc.add_argument("-o", "--output", type=Path, help="write JSONL here instead of stdout")
    sc.add_argument("--backbone", default=None, help="override the backbone path stored with the model")
    sc.add_argument("--batch-size", type=int, default=8)
    sc.add_argument("--device", default=None)
    sc.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                    help="backbone precision (default: bfloat16 on a GPU, float32 on a CPU)")
    sc.set_defaults(handler=run_score, interrupted_note="the rows scored so far are written (to --output when given)")

    rk = inner.add_parser("rank", help="within-question AUC of a model's estimates on DABench run trees",
                          description=_rank_doc(), formatter_class=HelpFormatter)
    rk.add_argument("model", type=Path, help="a folder written by 'jupiter value train'")
    rk.add_argument("runs", type=Path, nargs="+",
                    help="'jupiter bench dabench' run folders of a tree search (their trees/ are scored)")
    rk.add_argument("--data", type=Path, default=None, help="DABench folder (default: the shared benchmarks' copy)")
    rk.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    rk.add_argument("--nodes-out", type=Path, default=None,
                    help="also write each scored node (tree, tag, kind, right, value) as JSONL here, to compare "
                         "models or recompute the AUCs without scoring again")
    rk.add_argument("--batch-size", type=int, default=8)
    rk.add_argument("--device", default=None)
    rk.add_argument("--backbone", default=None, help="override the backbone path stored with the model")
    rk.add_argument("--dtype", default=None, choices=["float32", "bfloat16"],
                    help="backbone precision (default: bfloat16 on a GPU, float32 on a CPU)")
    rk.set_defaults(handler=run_rank)

    au = inner.add_parser("auc", help="the AUCs of estimates saved by 'jupiter value rank --nodes-out', no model",
                          description="Report the AUCs (over all nodes and within a question, with the 95 % "
                                      "interval) of the node estimates that 'jupiter value rank --nodes-out' saved: "
                                      "one file again, or several runs' files together (a question's trees from "
                                      "several runs are resampled together), without loading a model.",
                          formatter_class=HelpFormatter)
    au.add_argument("nodes", type=Path, nargs="+", help="--nodes-out files (.jsonl, or .jsonl.gz)")
    au.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    au.set_defaults(handler=run_auc)
    parser.set_defaults(handler=lambda args: parser.print_help() or 2)


#: config fields whose flag is not ``--`` + the field name with dashes
_IRREGULAR_FLAGS = {"grad_accumulation": "--grad-accum", "learning_rate": "--lr", "head_learning_rate": "--head-lr",
                    "gradient_checkpointing": "--no-gradient-checkpointing", "backbone": "--base",
                    "packing": "--no-packing",
                    "max_correct": "--max-correct", "max_wrong": "--max-wrong"}


def _fail(message: str) -> int:
    message = flag_message(message, _IRREGULAR_FLAGS, owners=("TrainConfig", "ExtractConfig", "ModelConfig"),
                           dash_unknown=True)  # errors name what the user typed
    print(f"jupiter: error: {message}", file=sys.stderr)
    return 2


def run_extract(args: argparse.Namespace) -> int:
    check_output_file(args.output, "--output")
    try:
        config = ExtractConfig(max_correct=args.max_correct, max_wrong=args.max_wrong,
                               max_wrong_if_no_correct=args.max_wrong_if_no_correct, seed=args.seed,
                               template=args.template, target=args.target)
        samples = extract_samples(args.trees, config)
    except (ConfigError, ExtractError) as exc:
        return _fail(str(exc))
    count = write_samples(samples, args.output)
    terminal = sum(1 for s in samples if s.is_terminal)
    print(json.dumps({"output": str(args.output), "trees": len(args.trees), "samples": count,
                      "terminal": terminal, "positive": sum(1 for s in samples if s.value > 0),
                      "negative": sum(1 for s in samples if s.value < 0)}))
    return 0


def _train_config(args: argparse.Namespace):
    """The profile's ``TrainConfig`` with the flags the user gave on top (ConfigError names a bad field)."""
    return train_profile(
        args.profile, epochs=args.epochs, batch_size=args.batch_size, grad_accumulation=args.grad_accum,
        learning_rate=args.lr, head_learning_rate=args.head_lr, weight_decay=args.weight_decay,
        warmup_steps=args.warmup_steps, max_grad_norm=args.max_grad_norm, eval_fraction=args.eval_fraction,
        gradient_checkpointing=False if args.no_gradient_checkpointing else None,
        checkpoint_every=args.checkpoint_every, max_steps=args.max_steps, seed=args.seed, device=args.device,
        packing=False if args.no_packing else None, pack_tokens=args.pack_tokens, dtype=args.dtype)


def _print_config(args: argparse.Namespace, train_config) -> int:
    print(json.dumps({"profile": args.profile, "train": train_config.to_dict(),
                      "model": {"base": args.base, "lora_r": args.lora_r, "lora_alpha": args.lora_alpha,
                                "lora_dropout": args.lora_dropout, "max_tokens": args.max_tokens,
                                "template": args.template},
                      "sources": TRAIN_SOURCES if args.profile == "paper" else {}}, indent=2))
    return 0


def run_train(args: argparse.Namespace) -> int:
    try:
        train_config = _train_config(args)
    except ConfigError as exc:
        return _fail(str(exc))
    if args.print_config:
        return _print_config(args, train_config)
    if args.samples is None or args.out is None:
        return _fail("value train: needs SAMPLES and --out (or --print-config)")
    check_output_folder(args.out)  # resumable from its checkpoints, but it must be a writable folder
    try:
        samples = read_samples(args.samples)
    except (ConfigError, ExtractError) as exc:
        return _fail(str(exc))
    from jupiter.console_log import EXIT_INTERRUPTED
    from value_model.model import ModelLoadError, resolve_backbone
    from value_model.train import TrainingInterrupted, train_value_model

    try:
        resolved = resolve_backbone(args.base)  # a bad --base fails here, before the samples are read
        # a named model ("default") is kept by name, so the saved model loads on any machine
        backbone = str(args.base) if resolved != str(args.base) and not Path(args.base).exists() else resolved
        model_config = ModelConfig(backbone=backbone, lora_r=args.lora_r,
                                   lora_alpha=args.lora_alpha, lora_dropout=args.lora_dropout,
                                   max_tokens=args.max_tokens, template=args.template)
        result = train_value_model(samples, model_config, train_config, args.out, resume=not args.no_resume)
    except TrainingInterrupted as exc:
        print(f"jupiter: interrupted; {exc}", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ConfigError, ModelLoadError, ValueError, FloatingPointError) as exc:
        return _fail(str(exc))
    last = result.history[-1]
    print(json.dumps({"output": str(result.output_dir), "steps": result.steps,
                      "train_samples": result.train_samples, "eval_samples": result.eval_samples,
                      "resumed_from": result.resumed_from, "eval_mse": last.eval_mse,
                      "eval_spearman": last.eval_spearman,
                      "initial_eval_mse": result.history[0].eval_mse,
                      "epochs": [{"epoch": e.epoch, "tokens_computed": e.tokens_computed,
                                  "tokens_per_path": e.tokens_per_path, "seconds": e.seconds}
                                 for e in result.epochs]}))
    return 0


def run_score(args: argparse.Namespace) -> int:
    if args.output is not None:
        check_output_file(args.output, "--output")
    records = read_jsonl(args.states)  # an unreadable file or line is a TaskError naming it: exit code 2
    for number, record in enumerate(records, 1):
        messages = record.get("messages") if isinstance(record, dict) else None
        if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m and "content" in m
                                                      for m in messages):
            return _fail(f"{args.states}: record {number}: needs 'messages': a list of {{role, content}}")
    from value_model.model import ModelLoadError
    from value_model.scorer import ValueScorer

    try:
        scorer = ValueScorer.load(args.model, device=args.device, batch_size=args.batch_size, backbone=args.backbone,
                                  dtype=args.dtype)
    except (ModelLoadError, ValueError) as exc:
        return _fail(str(exc))
    from tqdm import tqdm

    # Scored a chunk at a time and written as it goes: a long scoring run shows its progress, and one stopped
    # by Ctrl-C or an error keeps the rows it finished (flushed per chunk) instead of losing them all.
    chunk = max(1, args.batch_size) * 4
    out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        with tqdm(total=len(records), desc="value score", unit="state", file=sys.stderr, disable=None) as bar:
            for start in range(0, len(records), chunk):
                part = records[start:start + chunk]
                values = scorer.evaluate([r["messages"] for r in part])
                for index, (record, value) in enumerate(zip(part, values), start):
                    out.write(json.dumps({"index": index, **_echoed(record), "value": value}) + "\n")
                out.flush()
                bar.update(len(part))
    finally:
        if args.output:
            out.close()
    return 0


def _rank_doc() -> str:
    return ("Score the answer and live nodes of saved DABench trees with a value model and say how well it orders "
            "them: AUC over all nodes and within a question (the order the search uses), and how many trees the "
            "highest estimate decides right against the vote. Use trees grown without this model.")


def run_rank(args: argparse.Namespace) -> int:
    from benchmarks.dabench import load_dabench
    from benchmarks.paths import default_data_dir
    from benchmarks.value_rank import KINDS, kind_report, rank_trees, run_trees

    if args.nodes_out is not None:
        check_output_file(args.nodes_out, "--nodes-out")
    try:
        data = load_dabench(args.data if args.data is not None else default_data_dir("dabench"))
        trees = {}
        for run in args.runs:
            trees.update({f"{run.name}/{tree_id}": tree for tree_id, tree in run_trees(run).items()})
    except (OSError, ValueError) as exc:
        return _fail(str(exc))
    labels = {f"{run.name}/{label['id']}": label for run in args.runs for label in data.labels}
    from value_model.model import ModelLoadError
    from value_model.scorer import ValueScorer

    try:
        scorer = ValueScorer.load(args.model, device=args.device, batch_size=args.batch_size,
                                  backbone=args.backbone, dtype=args.dtype)
    except (ModelLoadError, ValueError) as exc:
        return _fail(str(exc))
    from tqdm import tqdm

    started = time.perf_counter()

    with tqdm(total=len(trees), desc="value rank", unit="tree", file=sys.stderr, disable=None) as bar:
        def score(histories: list) -> list[float]:
            values = scorer.evaluate(histories)
            bar.update(1)
            return values

        nodes, picks = rank_trees(trees, labels, score)
    seconds = round(time.perf_counter() - started, 3)
    if args.nodes_out is not None:
        with args.nodes_out.open("w", encoding="utf-8") as out:
            out.writelines(json.dumps(dataclasses.asdict(node)) + "\n" for node in nodes)
    reports = [kind_report(nodes, kind) for kind in KINDS]
    if args.json:
        print(json.dumps({"model": str(args.model), "runs": [str(r) for r in args.runs],
                          "kinds": [vars(r) for r in reports], "decisions": picks, "scoring_seconds": seconds,
                          "scored_nodes": len(nodes)}))
        return 0
    _print_reports(reports)
    print(f"\n{picks['trees_answered']} trees answered, a right answer in {picks['any_right']}; the vote is right in "
          f"{picks['vote_right']}, the highest estimate in {picks['value_right']}")
    return 0


def run_auc(args: argparse.Namespace) -> int:
    from benchmarks.value_rank import KINDS, kind_report, read_ranked_nodes

    try:
        nodes = [node for path in args.nodes for node in read_ranked_nodes(path)]
    except ValueError as exc:  # read_ranked_nodes names the file (an unreadable one too)
        return _fail(str(exc))
    seen: set[tuple[str, str]] = set()
    for node in nodes:  # one file given twice would count its questions twice and narrow the interval
        if (node.tree, node.tag) in seen:
            return _fail(f"node {node.tag} of tree {node.tree} is in the nodes twice: is a file given twice, or two "
                         "runs of one folder name?")
        seen.add((node.tree, node.tag))
    reports = [kind_report(nodes, kind) for kind in KINDS]
    if args.json:
        print(json.dumps({"nodes_files": [str(p) for p in args.nodes], "kinds": [vars(r) for r in reports],
                          "nodes": len(nodes)}))
    else:
        _print_reports(reports)
    return 0


def _print_reports(reports: list[KindReport]) -> None:
    print("| nodes | scored | right | AUC | AUC within a question (95 % interval) | pairs | questions with both |")
    print("|---|---|---|---|---|---|---|")
    for r in reports:
        interval = f" ({r.within_tree_interval[0]}-{r.within_tree_interval[1]})" if r.within_tree_interval else ""
        print(f"| {r.kind} | {r.nodes} | {r.right} | {r.auc} | {r.within_tree_auc}{interval} | {r.pairs} "
              f"| {r.mixed_trees} |")


def _echoed(record: dict) -> dict:
    """A state's own keys to write beside its score; a labelled sample's ``value`` comes back as ``label``."""
    echoed = {k: v for k, v in record.items() if k not in ("messages", "text", "value")}
    if "value" in record:
        echoed["label"] = record["value"]
    return echoed
