"""Deciding the final answer: majority vote over canonical answers, and the highest-value candidate.

Vote ties go to the group with the higher mean value, then to the group whose first answer came earliest.
"""

from __future__ import annotations

from dataclasses import dataclass

from jupiter.answers import canonical_answer

from search.tree import Node

__all__ = ["Candidate", "VoteEntry", "Verdict", "decide"]


@dataclass(frozen=True)
class Candidate:
    """One answer node."""

    tag: str
    answer: str
    key: str  # canonical_answer(answer)
    value: float
    visits: int
    evaluation: float | None


@dataclass(frozen=True)
class VoteEntry:
    """One group of equal answers."""

    key: str
    answer: str  # the earliest answer text of the group
    count: int
    mean_value: float
    first_tag: str


@dataclass(frozen=True)
class Verdict:
    candidates: tuple[Candidate, ...]
    vote_table: tuple[VoteEntry, ...]  # best first
    vote: Candidate | None  # the earliest node of the winning group
    by_value: Candidate | None


def _candidate(node: Node) -> Candidate:
    answer = node.final_answer or ""
    return Candidate(node.tag, answer, canonical_answer(answer), node.value, node.visit_count, node.evaluation)


def decide(answer_nodes: list[Node]) -> Verdict:
    """Vote and value decisions over ``answer_nodes`` (given in creation order)."""
    candidates = [_candidate(n) for n in answer_nodes]
    groups: dict[str, list[tuple[int, Candidate]]] = {}
    for index, candidate in enumerate(candidates):
        groups.setdefault(candidate.key, []).append((index, candidate))
    entries = []
    for key, members in groups.items():
        first_index, first = members[0]
        mean = sum(c.value for _, c in members) / len(members)
        entries.append((-len(members), -mean, first_index, VoteEntry(key, first.answer, len(members), mean, first.tag)))
    entries.sort(key=lambda e: e[:3])
    table = tuple(e[3] for e in entries)
    vote = next((c for c in candidates if c.tag == table[0].first_tag), None) if table else None
    by_value = None
    for candidate in candidates:  # strict > keeps the earliest among equals
        if by_value is None or candidate.value > by_value.value:
            by_value = candidate
    return Verdict(tuple(candidates), table, vote, by_value)
