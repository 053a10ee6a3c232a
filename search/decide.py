"""Deciding the final answer: majority vote over canonical answers, and the highest-value candidate.

A vote counts every time the policy sampled an answer: a node kept for several identical sibling replies
(``Node.multiplicity``) counts that many times. Vote ties go to the group with the higher mean value, then to
the group whose first answer came earliest. The group is reported in its most frequent raw spelling (the
official DABench scorer compares strings case-sensitively, so the grouping key must not leak into the answer).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from jupiter.answers import canonical_answer, equivalence_key
from search.config import Decision, Mode, SearchConfig, VoteKey
from search.tree import Node

__all__ = ["Candidate", "VoteEntry", "Verdict", "decide", "tally", "Choice", "choose", "KeyRule", "vote_key_rule"]


@dataclass(frozen=True)
class Candidate:
    """One answer node."""

    tag: str
    answer: str
    key: str  # canonical_answer(answer)
    value: float
    visits: int
    evaluation: float | None
    multiplicity: int = 1


@dataclass(frozen=True)
class VoteEntry:
    """One group of equal answers."""

    key: str
    answer: str  # the group's most frequent raw spelling (ties: the earliest)
    count: int  # votes: sampled replies, duplicates included
    mean_value: float
    first_tag: str


@dataclass(frozen=True)
class Verdict:
    candidates: tuple[Candidate, ...]
    vote_table: tuple[VoteEntry, ...]  # best first
    vote: Candidate | None  # the earliest node of the winning group with the reported spelling
    by_value: Candidate | None


@dataclass(frozen=True)
class KeyRule:
    """How a vote groups answers: ``key(answer)`` (None: no vote) and, optionally, which spellings a group
    reports first (``prefer``; then the most frequent)."""

    key: Callable[[str], str | None] = canonical_answer
    prefer: Callable[[str], bool] | None = None


def vote_key_rule(vote_key: VoteKey, format_text: str = "") -> KeyRule:
    """The grouping of ``vote_key`` for a task whose answer format is ``format_text``. With ``FORMAT`` a group
    reports a spelling already at the format's precision where it has one (``34.65`` before ``34.6459...``: the
    official scorer compares the reported string)."""
    if vote_key is VoteKey.FORMAT:
        def key(answer: str) -> str | None:
            return equivalence_key(answer, format_text)

        return KeyRule(key, lambda answer: canonical_answer(answer) == key(answer))
    return KeyRule()


def _candidate(node: Node, rule: KeyRule) -> Candidate | None:
    answer = node.final_answer or ""
    group = rule.key(answer)
    if group is None:
        return None
    return Candidate(node.tag, answer, group, node.value, node.visit_count, node.evaluation,
                     max(1, int(node.multiplicity)))


class Votable(Protocol):
    """What a vote needs of a candidate (``Candidate`` here, ``benchmarks.records.CandidateRecord`` there)."""

    @property
    def tag(self) -> str: ...

    @property
    def answer(self) -> str: ...

    @property
    def key(self) -> str: ...

    @property
    def value(self) -> float: ...

    @property
    def multiplicity(self) -> int: ...


V = TypeVar("V", bound=Votable)


def tally(candidates: Sequence[V], prefer: Callable[[str], bool] | None = None,
          ) -> tuple[tuple[VoteEntry, ...], V | None]:
    """The vote over ``candidates`` (in creation order): the table, best first, and the winning candidate.

    Each candidate counts ``multiplicity`` votes; ties go to the higher mean value, then the group found
    first; the group is reported in its most frequent raw spelling (among those ``prefer`` accepts, where it
    accepts any) and won by its earliest candidate with that spelling. The one voting rule: the search's decision
    and the benchmarks' curves both call it.
    """
    groups: dict[str, list[tuple[int, V]]] = {}
    for index, candidate in enumerate(candidates):
        groups.setdefault(candidate.key, []).append((index, candidate))
    entries = []
    for key, members in groups.items():
        first_index, first = members[0]
        votes = sum(max(1, int(c.multiplicity)) for _, c in members)
        mean = sum(c.value * max(1, int(c.multiplicity)) for _, c in members) / votes
        spellings: dict[str, int] = {}
        for _, c in members:  # insertion order = creation order, so max() keeps the earliest among equals
            spellings[c.answer] = spellings.get(c.answer, 0) + max(1, int(c.multiplicity))
        ranked = (lambda text, counts=spellings: (prefer(text), counts[text])) if prefer else spellings.__getitem__
        spelling = max(spellings, key=ranked)
        entries.append((-votes, -mean, first_index, VoteEntry(key, spelling, votes, mean, first.tag)))
    entries.sort(key=lambda e: e[:3])
    table = tuple(e[3] for e in entries)
    winner = None
    if table:
        winner = next(c for c in candidates if c.key == table[0].key and c.answer == table[0].answer)
    return table, winner


def decide(answer_nodes: list[Node], rule: KeyRule = KeyRule()) -> Verdict:
    """Vote and value decisions over ``answer_nodes`` (given in creation order); ``rule`` groups the answers
    (``vote_key_rule``; a node it gives no key is no candidate)."""
    candidates = [c for c in (_candidate(n, rule) for n in answer_nodes) if c is not None]
    table, vote = tally(candidates, rule.prefer)
    by_value = None
    for candidate in candidates:  # strict > keeps the earliest among equals
        if by_value is None or candidate.value > by_value.value:
            by_value = candidate
    return Verdict(tuple(candidates), table, vote, by_value)


@dataclass(frozen=True)
class Choice:
    """What a verdict becomes under a config: the decided candidate and the value answer worth reporting."""

    decision: Decision  # VOTE or VALUE (AUTO resolved)
    chosen: Candidate | None
    value_answer: str | None


def choose(verdict: Verdict, config: SearchConfig, value_given: bool) -> Choice:
    """Apply ``config.decision`` (AUTO: VALUE with a value model, else VOTE) to ``verdict``.

    The value answer is reported only where Q means something: with a value model, or in COLLECT, where
    answers carry label rewards. Without either every Q is 0 or a failure's −1.
    """
    decision = config.decision
    if decision is Decision.AUTO:
        decision = Decision.VALUE if value_given else Decision.VOTE
    chosen = verdict.by_value if decision is Decision.VALUE else verdict.vote
    meaningful = value_given or config.mode is Mode.COLLECT
    value_answer = verdict.by_value.answer if verdict.by_value is not None and meaningful else None
    return Choice(decision, chosen, value_answer)
