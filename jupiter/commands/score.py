"""``jupiter score dabench RESPONSES.jsonl --labels LABELS.jsonl``: the official DABench metrics.

Re-scoring is a separate, cheap command on purpose: rule-based answer checks have false negatives, so runs
keep their raw responses and can be scored again under any rule.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from jupiter.answers import score_dabench
from jupiter.task import TaskError, read_jsonl


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("score", help="score responses with a benchmark's official rules")
    inner = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    dab = inner.add_parser("dabench", help="InfiAgent-DABench: ABQ, PASQ, UASQ (official and strict)")
    dab.add_argument("responses", type=Path, help='JSONL of {"id": ..., "response": "..."}')
    dab.add_argument("--labels", type=Path, required=True, help="JSONL of {id, common_answers}")
    dab.add_argument("--questions", type=Path, help="questions JSONL: adds per-level and per-concept ABQ")
    dab.add_argument("--details", action="store_true", help="also print the verdict per question id")
    dab.set_defaults(handler=run_dabench)
    parser.set_defaults(handler=lambda args: parser.print_help() or 2)


def run_dabench(args: argparse.Namespace) -> int:
    responses = read_jsonl(args.responses)
    labels = read_jsonl(args.labels)
    for number, label in enumerate(labels, 1):
        if "id" not in label or not isinstance(label.get("common_answers"), list):
            raise TaskError(f"{args.labels}:{number}: a label needs 'id' and a 'common_answers' list")
    questions = read_jsonl(args.questions) if args.questions else None
    score = score_dabench(responses, labels, questions)
    print(json.dumps(score.to_dict(details=args.details)))
    return 0
