"""Decide a finished DABench run again under each vote key: how many questions each way of voting gets right.

Why offline: the vote key changes only the decision over a tree's candidates, never the search, so a run's
``results.jsonl`` (every candidate with its votes and value) is enough to measure an option such as
``--vote-key format`` on the very trees the run grew, without searching again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.dabench import DabenchData, dabench_correct
from benchmarks.records import CandidateRecord, ResultsLog
from search.config import VoteKey
from search.decide import tally, vote_key_rule

__all__ = ["revote"]


def revote(run_dir: str | Path, data: DabenchData) -> dict[str, Any]:
    """Per vote key: the questions the vote over each record's candidates gets right (official rule), and the
    question ids the keys decide differently. Raises FileNotFoundError without ``results.jsonl``."""
    path = Path(run_dir) / "results.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no results.jsonl (not a benchmark run folder)")
    records = ResultsLog(path).records()
    formats = {task.id: task.format for task in data.tasks}
    right: dict[str, list[str]] = {key.value: [] for key in VoteKey}
    answers: dict[str, dict[str, str | None]] = {key.value: {} for key in VoteKey}
    for record in records:
        label = data.label_for(record.id)
        for vote_key in VoteKey:
            rule = vote_key_rule(vote_key, formats.get(record.id, ""))
            kept = []
            for c in record.candidates:
                group = rule.key(c.answer)
                if group is not None:
                    kept.append(CandidateRecord(c.tag, c.answer, group, c.value, c.iteration, c.visits,
                                                c.multiplicity))
            _table, winner = tally(kept, rule.prefer)
            answer = winner.answer if winner is not None else None
            answers[vote_key.value][record.id] = answer
            if dabench_correct(answer, label):
                right[vote_key.value].append(record.id)
    changed = sorted((i for i in answers["exact"] if answers["exact"][i] != answers["format"][i]), key=str)
    return {
        "run": str(run_dir),
        "questions": len(records),
        "right": {key: len(ids) for key, ids in right.items()},
        "gained": sorted(set(right["format"]) - set(right["exact"]), key=str),
        "lost": sorted(set(right["exact"]) - set(right["format"]), key=str),
        "decided_differently": changed,
    }
