"""``jupiter score dabench RESPONSES.jsonl --labels LABELS.jsonl``: the official DABench metrics.

Re-scoring is a separate, cheap command on purpose: rule-based answer checks have false negatives, so runs
keep their raw responses and can be scored again under any rule.

Two denominators, named in the output: ``abq``/``pasq``/``uasq`` are the official figures over the
``answered`` questions (a non-empty response); ``*_all_labels`` count every id of ``--labels``, a missing
response as wrong (``*_strict`` is the old name of the same figures). Response ids that are not in
``--labels`` are not scored: they are counted in ``unknown_ids`` and named in a warning on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jupiter.answers import score_dabench
from jupiter.commands.helpformat import HelpFormatter
from jupiter.task import TaskError, read_jsonl


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("score", help="score responses with a benchmark's official rules")
    inner = parser.add_subparsers(dest="benchmark", metavar="BENCHMARK")
    dab = inner.add_parser("dabench", help="InfiAgent-DABench: ABQ, PASQ, UASQ (official and strict)",
                           description=__doc__, formatter_class=HelpFormatter)
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
    unknown = _unknown_ids(responses, labels)
    if unknown:
        print(f"jupiter score: warning: {_describe_unknown(unknown, labels, args.labels)}", file=sys.stderr)
    score = score_dabench(responses, labels, questions)
    out = score.to_dict(details=args.details)
    out.update({
        "answered": score.n,
        "labels": score.n_labels,
        "abq_all_labels": score.abq_strict,
        "pasq_all_labels": score.pasq_strict,
        "uasq_all_labels": score.uasq_strict,
        "unknown_ids": len(unknown),
        "denominators": {
            "abq, pasq, uasq": "answered: questions with a non-empty response (the official rule)",
            "*_all_labels (= *_strict)": "labels: every id in --labels; a missing response counts wrong",
        },
    })
    print(json.dumps(out))
    return 0


def _unknown_ids(responses: Sequence[Mapping[str, Any]], labels: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Response ids with no label, in file order, each once (compared as written, like the official scorer)."""
    known = {label["id"] for label in labels}
    unknown: dict[str, Any] = {}
    for record in responses:
        if "id" in record and record["id"] not in known:
            unknown.setdefault(json.dumps(record["id"]), record["id"])
    return list(unknown.values())


def _describe_unknown(unknown: list[Any], labels: Sequence[Mapping[str, Any]], where: Path) -> str:
    shown = ", ".join(json.dumps(i) for i in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
    text = f"{len(unknown)} response id(s) not in {where}, not scored: {shown}"
    as_text = {str(label["id"]) for label in labels}
    if any(str(i) in as_text for i in unknown):  # 1 vs "1": the official rule compares ids as written
        text += " (some match a label only as text: ids are compared as written, 1 and \"1\" differ)"
    return text
