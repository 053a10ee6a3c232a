"""Accuracy against search budget, recomputed from the candidates' iteration numbers (the paper's figures).

For a budget of T iterations, a task's outcome is what the search would have answered had it stopped after
iteration T: the decision (majority vote, or highest value) over the candidates found by then, and the
oracle (any candidate correct / best candidate). Values are the final backed-up values of the nodes — the
values the nodes had at iteration T were not recorded — so the value curve is a close reading, not an exact
replay. A candidate without an iteration number counts only at the full budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from benchmarks.records import CandidateRecord, TaskRecord

__all__ = ["Curve", "vote_pick", "value_pick", "accuracy_curves"]

#: a scorer: (a candidate, the task's record) → score in [0, 1] (1/0 for right/wrong)
Scorer = Callable[[CandidateRecord, TaskRecord], float]


@dataclass(frozen=True)
class Curve:
    """Mean score over tasks at each budget ``budgets[i]``."""

    name: str
    budgets: tuple[int, ...]
    values: tuple[float, ...]

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "budgets": list(self.budgets), "values": list(self.values)}


def vote_pick(candidates: Sequence[CandidateRecord]) -> CandidateRecord | None:
    """The majority vote as the search decides it (``search.decide.tally``: duplicates count, spelling kept)."""
    from search.decide import tally

    return tally(candidates)[1]  # type: ignore[return-value]


def value_pick(candidates: Sequence[CandidateRecord]) -> CandidateRecord | None:
    """The highest-value candidate (the earliest among equals)."""
    best = None
    for candidate in candidates:
        if best is None or candidate.value > best.value:
            best = candidate
    return best


def _found_by(candidates: Sequence[CandidateRecord], budget: int, full: int) -> list[CandidateRecord]:
    return [c for c in candidates if (c.iteration if c.iteration is not None else full) <= budget]


def accuracy_curves(records: Sequence[TaskRecord], score: Scorer, points: int = 50) -> list[Curve]:
    """Vote, value and oracle curves over budgets 1..max iterations (at most ``points`` budgets)."""
    if not records:
        return []
    full = max([r.iterations for r in records] + [c.iteration or 0 for r in records for c in r.candidates] + [1])
    step = max(1, -(-full // points))
    budgets = tuple(sorted(set(range(step, full + 1, step)) | {full}))
    curves = {"vote": [], "value": [], "oracle": []}
    for budget in budgets:
        totals = {name: 0.0 for name in curves}
        for record in records:
            found = _found_by(record.candidates, budget, max(record.iterations, 1))
            scores = {id(c): score(c, record) for c in found}
            for name, pick in (("vote", vote_pick), ("value", value_pick)):
                chosen = pick(found)
                totals[name] += scores[id(chosen)] if chosen is not None else 0.0
            totals["oracle"] += max(scores.values(), default=0.0)
        for name in curves:
            curves[name].append(totals[name] / len(records))
    return [Curve(name, budgets, tuple(values)) for name, values in curves.items()]
