"""Search quality: does the tree search beat ReAct and majority voting? (issue 12)

A simulated noisy policy samples steps of verified reference solutions of DABench questions (each step: the
current solution's next cell, a plausible wrong solution, or an erroring cell); every mode runs through the
real engine, the real fork sandbox and the real tables:

- ``react``: one ReAct rollout (``search.react_config()``);
- ``vote``: majority vote over independent ReAct runs (``search.vote_config()``);
- ``mcts``: PUCT inference without a value model (the ``paper`` profile: c_puct 0, vote decision);
- ``vote_eq``: voting with as many runs as spend the tokens the trees spent (equal token budget);
- ``mcts_vm``: collection with labels on half the questions → ``value_model.extract_samples`` → training the
  value model (Gemma 3 270M, CPU, ``--train-steps``) → inference with it on the other half; ``mcts_acc_heldout``
  is ``mcts`` on that same half.

    python benchmarks/quality/search_vs_baselines.py --json [--seeds 0,1,2] [--questions N] [--iterations 40]
        [--no-value-model] [--train-steps 40 | --train-epochs 3] [--device cpu|cuda] [--out FILE]
        [--keep-trees DIR]

Prints one JSON object with ``--json``: per mode ``acc``, ``in_tree_rate``, ``tokens``, ``model_calls``,
``kernel_seconds``, ``wall_s``; top level ``react_acc``, ``vote_acc``, ``mcts_acc``, ``mcts_vm_acc``,
``mcts_acc_heldout``, ``in_tree_rate``, ``tokens`` (per mode), ``vote_eq_acc``, ``vote_eq_tokens``,
``plurality_agreement``; with several seeds the top level holds means and ``spread`` the std/min/max.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from benchmarks.paths import default_data_dir
from benchmarks.quality.report import aggregate, seed_figures, targets
from benchmarks.quality.runs import ModeRun, run_mode
from benchmarks.quality.sim_policy import SimOptions, SimulatedPolicy
from benchmarks.quality.solutions import SOLUTIONS_PATH, QuestionSolutions, load_solutions, tasks_for
from benchmarks.quality.value_arm import (TrainSettings, TrainSummary, collected, finished_training, load_scorer,
                                          split_halves, train_from_trees)
from jupiter.task import Task
from search import SearchConfig, react_config, vote_config
from search.profiles import resolve_profile

log = logging.getLogger("benchmarks.quality")

__all__ = ["main", "mcts_config", "collect_config", "ordered_questions", "run_seed"]


def mcts_config(**overrides: Any) -> SearchConfig:
    """Inference without a value model: the ``paper`` profile (c_puct 0, answer by vote)."""
    return resolve_profile("paper", "infer", **overrides)


def collect_config(**overrides: Any) -> SearchConfig:
    """The paper's collection settings (c_puct 1.25, temperature 1, rewards from the label)."""
    return resolve_profile("paper", "collect", **overrides)


def ordered_questions(questions: Sequence[QuestionSolutions], limit: int | None) -> list[QuestionSolutions]:
    """Questions interleaved by level (easy, medium, hard, easy, ...) so that any prefix mixes the levels."""
    by_level: dict[str, list[QuestionSolutions]] = {}
    for question in sorted(questions, key=lambda q: q.id):
        by_level.setdefault(question.level, []).append(question)
    order = [level for level in ("easy", "medium", "hard") if level in by_level] + \
        sorted(set(by_level) - {"easy", "medium", "hard"})
    out: list[QuestionSolutions] = []
    while any(by_level[level] for level in order):
        for level in order:
            if by_level[level]:
                out.append(by_level[level].pop(0))
    return out[:limit] if limit else out


def _log_mode(seed: int, run: ModeRun) -> None:
    s = run.summary()
    print(f"[seed {seed}] {run.mode:8s} acc {s['acc']}  in-tree {s['in_tree_rate']}  plurality-agreement "
          f"{s['plurality_agreement']}  tokens {s['tokens']}  calls {s['model_calls']}  kernel {s['kernel_seconds']}s"
          f"  wall {s['wall_s']}s", file=sys.stderr, flush=True)


MODES = ("react", "vote", "mcts", "vote_eq", "vm")


def run_seed(seed: int, tasks: list[Task], questions: Sequence[QuestionSolutions], args: argparse.Namespace,
             workdir: Path, trained: dict[str, Any], on_mode: Any = None) -> dict[str, Any]:
    """The chosen modes for one seed; returns {figures, modes, runs, train}. ``trained`` caches a value model.

    ``on_mode(runs)`` is called after every mode (the CLI writes a partial report, so a stopped run keeps what
    it measured).
    """
    options = SimOptions(p_switch=args.p_switch, p_error=args.p_error, p_fix=args.p_fix)
    modes = set(args.modes)
    runs: dict[str, ModeRun] = {}

    def run(name: str, config: SearchConfig, subset: list[Task] | None = None, value: Any = None,
            tree_dir: Path | None = None) -> ModeRun:
        policy = SimulatedPolicy(questions, options)
        result = run_mode(name, subset if subset is not None else tasks, policy, config, value=value, seed=seed,
                          tree_dir=tree_dir)
        runs[name] = result
        _log_mode(seed, result)
        if on_mode is not None:
            on_mode(runs)
        return result

    keep = Path(args.keep_trees) / f"seed-{seed}" if args.keep_trees else None
    infer = mcts_config(iterations=args.iterations, expansions=args.expansions)
    if "react" in modes:
        run("react", react_config())
    if "vote" in modes or "vote_eq" in modes:
        run("vote", vote_config(runs=args.vote_runs))
    if "mcts" in modes or "vote_eq" in modes:
        run("mcts", infer, tree_dir=keep / "mcts" if keep else None)
    eq_runs = None
    if "vote_eq" in modes:
        per_run = runs["vote"].summary()["tokens"] / max(1, args.vote_runs)
        eq_runs = max(1, math.ceil(runs["mcts"].summary()["tokens"] / per_run)) if per_run > 0 else args.vote_runs
        run("vote_eq", vote_config(runs=eq_runs))
    heldout = None
    train: TrainSummary | None = None
    if "vm" in modes:
        collect_half, infer_half = split_halves(tasks)
        if args.vm_questions:
            collect_half, infer_half = collect_half[: args.vm_questions], infer_half[: args.vm_questions]
        model_dir = trained.get("model_dir")
        if model_dir is None or args.train_per_seed:
            tree_dir = workdir / f"seed-{seed}" / "collect"
            value_dir = workdir / f"seed-{seed}" / "value"
            settings = TrainSettings(steps=args.train_steps, seed=seed, device=args.device, epochs=args.train_epochs)
            train = finished_training(value_dir, settings)
            if train is None and collected(tree_dir, collect_half):
                print(f"[seed {seed}] collection trees found in {tree_dir}: not collected again",
                      file=sys.stderr, flush=True)
            elif train is None:
                run("collect", collect_config(iterations=args.collect_iterations, expansions=args.expansions),
                    subset=collect_half, tree_dir=tree_dir)
            if train is None:
                train = train_from_trees(sorted(tree_dir.glob("*.json")), value_dir, settings)
            else:
                print(f"[seed {seed}] trained value model found in {value_dir}: not trained again",
                      file=sys.stderr, flush=True)
            print(f"[seed {seed}] value model: {json.dumps(train.to_dict())}", file=sys.stderr, flush=True)
            trained.update(model_dir=train.model_dir, summary=train,
                           scorer=load_scorer(train.model_dir, device=args.device))
        held_ids = [t.id for t in infer_half]
        if "mcts" in runs and set(held_ids) <= {o.task_id for o in runs["mcts"].outcomes}:
            heldout = runs["mcts"].subset(held_ids).summary()
        else:  # the held-out half alone, same settings (mcts_acc_heldout)
            heldout = run("mcts_heldout", infer, subset=infer_half,
                          tree_dir=keep / "mcts_heldout" if keep else None).summary()
        run("mcts_vm", infer, subset=infer_half, value=trained["scorer"],
            tree_dir=keep / "mcts_vm" if keep else None)
    summaries = {name: r.summary() for name, r in runs.items() if name not in ("collect", "mcts_heldout")}
    figures = seed_figures(summaries, heldout, eq_runs)
    figures["seed"] = seed
    summary = train or trained.get("summary")
    return {"figures": figures, "modes": {name: r.summary() for name, r in runs.items()},
            "train": summary.to_dict() if summary else None, "runs": runs}


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--seeds", default="0", help="comma-separated seeds (mean and spread over them)")
    p.add_argument("--questions", type=int, default=None, help="first N questions, levels interleaved")
    p.add_argument("--iterations", type=int, default=40,
                   help="tree iterations at inference (the paper's 40; issue 12's first look used 20)")
    p.add_argument("--expansions", type=int, default=3, help="K, children per expansion")
    p.add_argument("--collect-iterations", type=int, default=50, help="iterations per collection tree (paper: 50)")
    p.add_argument("--vote-runs", type=int, default=5)
    p.add_argument("--modes", default=",".join(MODES),
                   help=f"comma-separated subset of {','.join(MODES)} (vm: the collect/train/infer arm)")
    p.add_argument("--no-value-model", action="store_true", help="skip the collect/train/infer arm (vm)")
    p.add_argument("--vm-questions", type=int, default=None,
                   help="questions per half in the value-model arm (default: the whole half)")
    p.add_argument("--merge", nargs="+", type=Path, default=None,
                   help="no run: aggregate the per-seed figures of these --out files into one report")
    p.add_argument("--train-steps", type=int, default=40, help="value-model optimizer steps")
    p.add_argument("--train-epochs", type=float, default=None,
                   help="train this many passes over the samples instead of --train-steps (the paper: 3)")
    p.add_argument("--device", default="cpu",
                   help="where the value model trains and scores: cpu (default) or cuda (a GPU makes the paper's "
                        "3 epochs affordable)")
    p.add_argument("--train-per-seed", action="store_true",
                   help="collect and train again for every seed (default: train once, on the first seed's trees)")
    p.add_argument("--p-switch", type=float, default=SimOptions.p_switch)
    p.add_argument("--p-error", type=float, default=SimOptions.p_error)
    p.add_argument("--p-fix", type=float, default=SimOptions.p_fix)
    p.add_argument("--solutions", type=Path, default=SOLUTIONS_PATH)
    p.add_argument("--dabench", type=Path, default=None, help="DABench folder (default: the shared copy)")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON report (with per-tree outcomes) here")
    p.add_argument("--keep-trees", default=None, help="save the mcts / mcts_vm trees under this folder")
    p.add_argument("--workdir", type=Path, default=None, help="collection trees and the value model (default: temp)")
    return p


def _missing_dabench(folder: Path, questions: Sequence[Any]) -> str | None:
    """What of the DABench copy the questions need is not in ``folder`` (None: all there)."""
    if not folder.is_dir():
        return "folder not found"
    if not (folder / "da-dev-questions.jsonl").is_file():
        return "da-dev-questions.jsonl not found (not a DABench copy?)"
    tables = folder / "tables"
    absent = sorted({q.file for q in questions if not (tables / q.file).is_file()})
    if absent:
        return f"tables/ lacks {', '.join(absent[:5])}{' ...' if len(absent) > 5 else ''}"
    return None


def _device_error(device: str) -> str | None:
    """Why the value model cannot run on ``device`` here (None when it can): said before any search runs."""
    if device == "cpu":
        return None
    if not device.startswith("cuda"):
        return "must be cpu or cuda (or cuda:N)"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device is visible to torch on this machine"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if args.merge:
        return _merge(args)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(args.modes) - set(MODES)
    if unknown:
        print(f"search_vs_baselines: --modes: unknown {sorted(unknown)} (choose from {list(MODES)})", file=sys.stderr)
        return 2
    device_error = _device_error(args.device) if "vm" in args.modes and not args.no_value_model else None
    if device_error:
        print(f"search_vs_baselines: --device {args.device}: {device_error}", file=sys.stderr)
        return 2
    if args.train_epochs is not None and not args.train_epochs > 0:
        print(f"search_vs_baselines: --train-epochs: must be > 0 (got {args.train_epochs})", file=sys.stderr)
        return 2
    if args.no_value_model:
        args.modes = [m for m in args.modes if m != "vm"]
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    solutions = load_solutions(args.solutions)
    questions = ordered_questions(solutions.questions, args.questions)
    dabench = Path(args.dabench) if args.dabench else default_data_dir("dabench")
    missing = _missing_dabench(dabench, questions)
    if missing:  # without the tables every tree would fail at its first cell: say so instead of scoring 0
        flag = "--dabench" if args.dabench else "--dabench (default: $JUPITER_SHARED or ../shared beside the checkout)"
        print(f"search_vs_baselines: {flag}: {dabench}: {missing}", file=sys.stderr)
        return 2
    tasks = tasks_for(questions, dabench)
    started = time.perf_counter()
    per_seed: list[dict[str, Any]] = []
    interrupted = False
    previous_term = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        with tempfile.TemporaryDirectory(prefix="jupiter-quality-") as tmp:
            workdir = args.workdir or Path(tmp)
            trained: dict[str, Any] = {}
            for seed in seeds:
                def partial(runs: dict[str, ModeRun], seed: int = seed) -> None:
                    if args.out is not None:
                        args.out.parent.mkdir(parents=True, exist_ok=True)
                        done = {"seed": seed, "finished_seeds": [s["figures"] for s in per_seed],
                                "modes": {n: r.to_dict() for n, r in runs.items()}}
                        args.out.with_suffix(".partial.json").write_text(json.dumps(done, default=str) + "\n",
                                                                          encoding="utf-8")
                per_seed.append(run_seed(seed, tasks, questions, args, workdir, trained, on_mode=partial))
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: report the seeds that finished (the partial file has the rest)
        interrupted = True
        if not per_seed:
            print("interrupted before any seed finished; the modes measured so far are in the .partial.json "
                  "beside --out", file=sys.stderr)
            return 130
        seeds = [s["figures"]["seed"] for s in per_seed]
        print(f"interrupted: reporting the finished seed(s) {seeds}", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous_term)
    report = aggregate([s["figures"] for s in per_seed])
    report["targets"] = targets(report)
    report["modes"] = {name: summary for name, summary in per_seed[0]["modes"].items()} if len(seeds) == 1 else \
        {name: aggregate_mode([s["modes"][name] for s in per_seed if name in s["modes"]])
         for name in per_seed[0]["modes"]}
    report["train"] = per_seed[0]["train"]
    report["settings"] = {"seeds": seeds, "questions": len(tasks), "question_ids": [q.id for q in questions],
                          "iterations": args.iterations, "expansions": args.expansions,
                          "collect_iterations": args.collect_iterations, "vote_runs": args.vote_runs,
                          "modes": args.modes, "vm_questions": args.vm_questions,
                          "train_steps": args.train_steps if "vm" in args.modes else None,
                          "train_epochs": args.train_epochs if "vm" in args.modes else None,
                          "device": args.device,
                          "train_per_seed": args.train_per_seed,
                          "policy": {"p_switch": args.p_switch, "p_error": args.p_error, "p_fix": args.p_fix},
                          "solutions_verified": solutions.verified is not None and
                          bool(solutions.verified.get("all_passed")),
                          "mcts_config": mcts_config(iterations=args.iterations,
                                                     expansions=args.expansions).to_dict()}
    report["wall_s"] = round(time.perf_counter() - started, 1)
    if interrupted:
        report["interrupted"] = True
    if args.out is not None:
        full = dict(report, per_seed=[{"figures": s["figures"], "modes": s["modes"],
                                       "outcomes": {n: r.to_dict()["outcomes"] for n, r in s["runs"].items()}}
                                      for s in per_seed])
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(full, indent=1, default=str) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(report, default=str))
    else:
        for key in ("react_acc", "vote_acc", "mcts_acc", "mcts_vm_acc", "mcts_acc_heldout", "vote_eq_acc",
                    "in_tree_rate", "plurality_agreement"):
            print(f"{key:24s} {report.get(key)}")
        print(f"{'tokens':24s} {report.get('tokens')}")
    return 130 if interrupted else 0


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _merge(args: argparse.Namespace) -> int:
    """Aggregate the per-seed figures of several ``--out`` files (runs split over processes)."""
    per_seed: list[dict[str, Any]] = []
    for path in args.merge:
        doc = json.loads(path.read_text(encoding="utf-8"))
        per_seed.extend(entry["figures"] for entry in doc["per_seed"])
    by_seed: dict[int, dict[str, Any]] = {}
    for figures in per_seed:  # one entry per seed: the files' figures are combined key by key
        merged = by_seed.setdefault(figures["seed"], {"tokens": {}})
        for key, value in figures.items():
            if key == "tokens":
                merged["tokens"].update({k: v for k, v in value.items() if v is not None})
            elif value is not None or key not in merged:
                merged[key] = value
    report = aggregate([by_seed[s] for s in sorted(by_seed)])
    report["targets"] = targets(report)
    report["settings"] = {"merged_from": [str(p) for p in args.merge], "seeds": sorted(by_seed)}
    print(json.dumps(report, default=str))
    return 0


def aggregate_mode(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of each numeric field of a mode's summaries over seeds."""
    out: dict[str, Any] = {}
    for key in summaries[0]:
        values = [s[key] for s in summaries if isinstance(s.get(key), (int, float))]
        out[key] = round(sum(values) / len(values), 4) if values else None
    return out


if __name__ == "__main__":
    sys.exit(main())
