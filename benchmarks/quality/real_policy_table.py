"""The real-policy quality table: DABench runs of ``jupiter bench dabench`` side by side, with why they fail.

    python benchmarks/quality/real_policy_table.py ARM=RUN_DIR [ARM=RUN_DIR ...] [--json]

For each run folder (``results.jsonl`` and ``trees/`` as ``jupiter bench dabench`` writes them) it reports,
over the run's tasks: ABQ (every sub-answer right; a task without an answer counts wrong) overall and per
level, the format-valid reply rate, and where the failures come from — measured on the saved trees, not
guessed:

- **format-valid reply**: a model reply that parses as one python block, or as a final answer holding at
  least one ``@name[value]``; the rest are split into no code, empty code, unparsable, cut by the token limit,
  and answers without ``@name[value]``;
- **code errors by type**: the exception name of every cell that raised (KeyError, NameError, ...);
- **wrong logic**: tasks with a well-formed answer whose values are wrong;
- tokens (prompt, generated), model calls, wall seconds.

Prints a markdown table (or one JSON object with ``--json``). Scoring is the project's DABench scorer
(``benchmarks.dabench.dabench_correct``), so the figures equal ``summary.json``'s strict ABQ.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from jupiter.appendlog import read_records

from benchmarks.dabench import dabench_correct, load_dabench
from benchmarks.paths import default_data_dir
from search.tree import NodeStatus
from search.tree_io import load_tree

_ANSWER = re.compile(r"@(\w+)\[(.*?)\]")
_EXCEPTION = re.compile(r"^(\w*(?:Error|Exception|Warning|Interrupt|Exit))\b", re.MULTILINE)
_BAD_REPLY = {NodeStatus.NO_CODE: "no_code", NodeStatus.EMPTY_CODE: "empty_code",
              NodeStatus.UNPARSABLE: "unparsable", NodeStatus.TRUNCATED_REPLY: "cut_by_max_tokens"}


def _records(run: Path) -> dict[str, dict[str, Any]]:
    return {str(row["id"]): row for row in read_records(run / "results.jsonl")}  # a resumed run's later line wins


def _reply_kinds(run: Path, ids: list[str]) -> tuple[Counter[str], Counter[str]]:
    kinds: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for task_id in ids:
        path = run / "trees" / f"{task_id}.json"
        if not path.is_file():
            continue
        for node in load_tree(path):
            if node.status in (NodeStatus.ROOT, NodeStatus.INFRASTRUCTURE):
                continue
            weight = max(1, node.multiplicity)
            if node.status in _BAD_REPLY:
                kinds[_BAD_REPLY[node.status]] += weight
            elif node.status is NodeStatus.ANSWER:
                kinds["answer" if _ANSWER.search(node.final_answer or "") else "answer_without_format"] += weight
            else:
                kinds["code"] += weight
                if node.status is NodeStatus.CODE_ERROR:
                    found = _EXCEPTION.findall(node.observation or "")
                    errors[found[-1] if found else "other"] += weight
    return kinds, errors


def arm_row(name: str, run: Path, data_dir: Path | None = None) -> dict[str, Any]:
    """One arm's figures (see the module docstring)."""
    data = load_dabench(data_dir or default_data_dir("dabench"))
    labels = {str(label["id"]): label for label in data.labels}
    levels = {str(task.id): task.level for task in data.tasks}
    records = _records(run)
    ids = sorted(records, key=lambda i: (len(i), i))
    right = {i: dabench_correct(records[i].get("answer"), labels.get(i)) for i in ids}
    formatted = {i: bool(_ANSWER.search(records[i].get("answer") or "")) for i in ids}
    by_level: dict[str, list[bool]] = {}
    for i in ids:
        by_level.setdefault(levels.get(i, "?"), []).append(right[i])
    kinds, errors = _reply_kinds(run, ids)
    replies = sum(kinds.values())
    valid = kinds["code"] + kinds["answer"]
    stats = [records[i].get("stats") or {} for i in ids]
    return {
        "arm": name,
        "run": str(run),
        "tasks": len(ids),
        "abq": round(sum(right.values()) / len(ids), 4) if ids else None,
        "abq_by_level": {lv: round(sum(v) / len(v), 4) for lv, v in sorted(by_level.items())},
        "answered": sum(formatted.values()),
        "wrong_logic": sum(formatted[i] and not right[i] for i in ids),
        "replies": replies,
        "format_valid_rate": round(valid / replies, 4) if replies else None,
        "reply_kinds": dict(kinds.most_common()),
        "code_errors": dict(errors.most_common()),
        "model_calls": sum(int(r.get("model_calls") or 0) for r in records.values()),
        "prompt_tokens": sum(int(s.get("prompt_tokens") or 0) for s in stats),
        "completion_tokens": sum(int(s.get("completion_tokens") or 0) for s in stats),
        "seconds": round(sum(float(r.get("seconds") or 0.0) for r in records.values()), 1),
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    levels = sorted({lv for r in rows for lv in r["abq_by_level"]}, key=["easy", "medium", "hard"].index)
    head = ["arm", "tasks", "ABQ"] + [f"ABQ {lv}" for lv in levels] + [
        "format-valid replies", "answered", "wrong logic", "top code errors", "generated tokens", "task-seconds"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        errors = ", ".join(f"{k} {v}" for k, v in list(r["code_errors"].items())[:3]) or "-"
        cells = [r["arm"], r["tasks"], f"{r['abq']:.3f}"] + [
            f"{r['abq_by_level'].get(lv, 0):.2f}" for lv in levels] + [
            f"{r['format_valid_rate']:.1%}" if r["format_valid_rate"] is not None else "-", r["answered"],
            r["wrong_logic"], errors, r["completion_tokens"], r["seconds"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("arms", nargs="+", help="ARM=RUN_DIR")
    parser.add_argument("--data", type=Path, default=None, help="DABench folder (default: the shared copy)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    for arm in args.arms:
        name, sep, run = arm.partition("=")
        if not sep or not Path(run, "results.jsonl").is_file():
            print(f"real_policy_table: {arm!r}: give ARM=RUN_DIR with a results.jsonl", file=sys.stderr)
            return 2
        rows.append(arm_row(name, Path(run), args.data))
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
