"""Does a trained value model rank the states of questions it never saw? A probe of the value-model arm.

The arm's search can only gain from a value model that orders states of *new* questions. This probe measures
that directly, with the arm's own pieces: collect with labels on the held-out half (the paper's collection
settings, the same simulated policy), extract samples as training did (``value_model.extract_samples``), and
score them with the trained model. It reports, on those unseen questions and on the training samples for
contrast: mean squared error (and that of always answering the training mean), Spearman's rho, and the AUC of
telling a right state (Q > 0) from a wrong one (Q < 0), for all states and for answer (terminal) states.

    python -m benchmarks.quality.value_probe --model WORKDIR/seed-0/value/model --json [--out FILE]

It reads ``samples.jsonl`` beside the model folder (what the arm trained on) when it is there.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from sklearn.metrics import roc_auc_score

from benchmarks.paths import default_data_dir
from benchmarks.quality.runs import run_mode
from benchmarks.quality.search_vs_baselines import collect_config, ordered_questions
from benchmarks.quality.sim_policy import SimOptions, SimulatedPolicy
from benchmarks.quality.solutions import load_solutions, tasks_for
from benchmarks.quality.value_arm import load_scorer, split_halves
from value_model.extract import ExtractConfig, Sample, extract_samples, read_samples
from value_model.metrics import mse, spearman

__all__ = ["auc", "rank_report", "main"]


def auc(values: Sequence[float], targets: Sequence[float]) -> float | None:
    """P(value of a right state > value of a wrong one), ties counting half (scikit-learn's ROC AUC); None without
    both kinds. Targets of 0 are neither."""
    kept = [(v, t > 0) for v, t in zip(values, targets) if t != 0]
    if len({right for _, right in kept}) < 2:
        return None
    return float(roc_auc_score([right for _, right in kept], [v for v, _ in kept]))


def rank_report(values: Sequence[float], samples: Sequence[Sample], train_mean: float) -> dict[str, Any]:
    """MSE (and the constant predictor's), Spearman and AUC over all samples and over terminal ones."""

    def block(pairs: list[tuple[float, Sample]]) -> dict[str, Any]:
        if len(pairs) < 2:
            return {"samples": len(pairs)}
        v = [p for p, _ in pairs]
        t = [s.value for _, s in pairs]
        return {"samples": len(pairs), "positive": sum(x > 0 for x in t), "negative": sum(x < 0 for x in t),
                "mse": round(mse(v, t), 4), "mse_constant": round(mse([train_mean] * len(t), t), 4),
                "spearman": None if (rho := spearman(v, t)) is None else round(rho, 4),
                "auc": None if auc(v, t) is None else round(auc(v, t), 4),
                "mean_value": round(sum(v) / len(v), 4)}

    pairs = list(zip(values, samples))
    return {"all": block(pairs), "terminal": block([p for p in pairs if p[1].is_terminal]),
            "intermediate": block([p for p in pairs if not p[1].is_terminal])}


def _score(scorer: Any, samples: Sequence[Sample]) -> list[float]:
    return scorer.evaluate([list(s.messages) for s in samples])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True, help="a value model folder the arm trained")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--seed", type=int, default=0, help="the simulated policy's seed for the held-out collection")
    p.add_argument("--questions", type=int, default=None, help="first N questions, as the arm was run")
    p.add_argument("--collect-iterations", type=int, default=50, help="iterations per collection tree (paper: 50)")
    p.add_argument("--expansions", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dabench", type=Path, default=None)
    p.add_argument("--out", type=Path, default=None, help="also write the report here")
    args = p.parse_args(argv)
    if not (args.model / "value_config.json").is_file():
        print(f"value_probe: --model {args.model}: not a value model folder (value_config.json missing)",
              file=sys.stderr)
        return 2
    started = time.perf_counter()
    questions = ordered_questions(load_solutions().questions, args.questions)
    tasks = tasks_for(questions, args.dabench or default_data_dir("dabench"))
    _, held_out = split_halves(tasks)
    scorer = load_scorer(args.model, device=args.device)
    report: dict[str, Any] = {"model": str(args.model), "held_out_question_ids": [t.id for t in held_out]}
    train_file = args.model.parent / "samples.jsonl"
    train_mean = 0.0
    if train_file.is_file():
        train = read_samples(train_file)
        train_mean = sum(s.value for s in train) / len(train)
        report["training"] = rank_report(_score(scorer, train), train, train_mean)
    with tempfile.TemporaryDirectory(prefix="value-probe-") as tmp:
        tree_dir = Path(tmp) / "trees"
        run_mode("probe-collect", held_out, SimulatedPolicy(questions, SimOptions()),
                 collect_config(iterations=args.collect_iterations, expansions=args.expansions), seed=args.seed,
                 tree_dir=tree_dir)
        samples = extract_samples(sorted(tree_dir.glob("*.json")), ExtractConfig(seed=args.seed))
    report["held_out"] = rank_report(_score(scorer, samples), samples, train_mean)
    report["train_mean"] = round(train_mean, 4)
    report["wall_s"] = round(time.perf_counter() - started, 1)
    text = json.dumps(report)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    print(text if args.json else json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
