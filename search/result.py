"""What a search returns: the tree, the decision, and the cost of getting there."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from jupiter.answers import reward
from search.config import Mode, SearchConfig
from search.decide import Candidate, Verdict, choose, decide, vote_key_rule
from search.step import iterations_done
from search.tree import MODEL_FAILURES, NodeStatus, Tree

__all__ = ["SearchStats", "Costs", "tree_stats", "SearchResult", "result_from_tree"]


@dataclass
class SearchStats:
    """Cost and outcome counters of one tree: what the tree records (iterations, nodes and their outcomes, cell
    time, folded duplicates) is counted from it (``tree_stats``), the rest is the executor's ``Costs``.

    ``model_calls`` counts the batched policy calls this tree took part in (one call serves many trees);
    ``prompt_tokens`` counts each history this tree sent once per call, however many samples or backend
    requests it took — ``jupiter.llm.PolicyStats``' definition, so the trees of one solve add up to the
    policy's figure — and is None when the backend does not report it; ``kernel_seconds`` sums the wall time of
    this tree's cells; ``model_failures`` excludes infrastructure failures, which are counted apart.
    ``model_seconds`` and ``value_seconds`` are this tree's share of the policy and value-model calls' wall time
    (a call's time split evenly over the histories it was sent), so the trees of one run add up to the calls'.
    """

    iterations: int = 0
    nodes: int = 0
    model_calls: int = 0
    requests: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    value_calls: int = 0
    model_seconds: float = 0.0
    value_seconds: float = 0.0
    kernel_seconds: float = 0.0
    wall_seconds: float = 0.0
    duplicates_dropped: int = 0
    repeats_resampled: int = 0  # replies that repeated their parent's failed cell, replaced by a new sample
    invalid_values: int = 0  # value-model estimates that were NaN or infinite (treated as "no estimate")
    infrastructure_failures: int = 0
    model_failures: int = 0
    code_errors: int = 0
    answers: int = 0
    resumes: int = 0  # how often the tree was continued from a checkpoint after its run was stopped

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in ("model_seconds", "value_seconds", "kernel_seconds"):
            out[name] = round(getattr(self, name), 4)
        out["wall_seconds"] = round(self.wall_seconds, 4)
        return out


@dataclass
class Costs:
    """What searching a tree cost that the tree does not record: policy calls and requests, tokens, value calls
    and their unusable estimates, resampled repeats, resumes. The executor adds to them as it calls
    (``search.executor``); ``tree_stats`` adds what the tree records."""

    model_calls: int = 0
    requests: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int = 0
    value_calls: int = 0
    model_seconds: float = 0.0  # this tree's share of the policy calls' wall time
    value_seconds: float = 0.0  # and of the value model's
    repeats_resampled: int = 0
    invalid_values: int = 0
    resumes: int = 0

    @classmethod
    def of(cls, stats: SearchStats) -> Costs:
        """The costs a saved tree's stats carry (a continued tree goes on counting from them)."""
        return cls(**{f.name: getattr(stats, f.name) for f in fields(cls)})


def tree_stats(tree: Tree, mode: Mode, costs: Costs, wall_seconds: float) -> SearchStats:
    """``SearchStats`` of ``tree`` now: its counts from its nodes, with ``costs`` and the wall time."""
    nodes = tree.nodes
    return SearchStats(
        **asdict(costs),
        iterations=iterations_done(tree, mode),
        nodes=len(nodes),
        kernel_seconds=sum(n.timings.get("cell_s", 0.0) for n in nodes),
        wall_seconds=wall_seconds,
        duplicates_dropped=sum(n.multiplicity - 1 for n in nodes),
        infrastructure_failures=sum(n.is_infrastructure_failure for n in nodes),
        model_failures=sum(n.terminal in MODEL_FAILURES or (n.is_malformed and not n.is_terminal) for n in nodes),
        code_errors=sum(n.status is NodeStatus.CODE_ERROR for n in nodes),
        answers=sum(n.is_answer for n in nodes),
    )


@dataclass
class SearchResult:
    """The outcome of one search.

    ``answer`` is the decided answer (vote or value, per ``decided_by``); ``vote_answer`` and
    ``value_answer`` are recorded beside it (``value_answer`` only when a value model scored the nodes). ``error`` is
    set when the tree could not run at all (e.g. the sandbox failed to open its root), in which case there are no
    candidates.
    """

    task_id: str
    answer: str | None
    decided_by: str
    vote_answer: str | None
    value_answer: str | None
    verdict: Verdict
    tree: Tree
    config: SearchConfig
    stats: SearchStats
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    interrupted: bool = False
    """The tree was stopped early (a stop request, Ctrl-C, SIGTERM): the decision is over what it had."""
    files: dict[str, bytes] = field(default_factory=dict)
    """The captured file of each node whose cell wrote it (tag -> bytes; DSBench scores them all), filled when the tree
    ran elsewhere (a Ray worker asked for ``capture_file``); in-process runs read their files from the sandbox
    instead."""

    @property
    def candidates(self) -> tuple[Candidate, ...]:
        return self.verdict.candidates

    @property
    def vote_table(self) -> dict[str, int]:
        return {e.key: e.count for e in self.verdict.vote_table}

    @property
    def chosen_tag(self) -> str | None:
        chosen = self.verdict.by_value if self.decided_by == "value" else self.verdict.vote
        return chosen.tag if chosen else None

    @property
    def correct(self) -> bool | None:
        """Whether the decided answer matches the task's label (None without a label or an answer)."""
        label = self.tree.task.label if self.tree.task is not None else None
        if label is None or self.answer is None:
            return None
        return reward(self.answer, label) == 1.0

    def to_dict(self) -> dict[str, Any]:
        """The ``result.json`` layout."""
        label = self.tree.task.label if self.tree.task is not None else None
        return {
            "task_id": self.task_id,
            "answer": self.answer,
            "decided_by": self.decided_by,
            "chosen_tag": self.chosen_tag,
            "vote_answer": self.vote_answer,
            "value_answer": self.value_answer,
            "vote_table": [asdict(e) for e in self.verdict.vote_table],
            "candidates": [asdict(c) for c in self.verdict.candidates],
            "label": label,
            "correct": self.correct,
            "iterations": self.stats.iterations,
            "nodes": self.stats.nodes,
            "model_calls": self.stats.model_calls,
            "seconds": round(self.stats.wall_seconds, 3),
            "stats": self.stats.to_dict(),
            "config": self.config.to_dict(),
            "notes": list(self.notes),
            "error": self.error,
            "interrupted": self.interrupted,
        }


def result_from_tree(task_id: str, tree: Tree, config: SearchConfig, stats: SearchStats, *, value_given: bool,
                     error: str | None = None, interrupted: bool = False, notes: list[str] | None = None,
                     files: dict[str, bytes] | None = None) -> SearchResult:
    """Decide over ``tree`` as ``config`` says and wrap it as a ``SearchResult``.

    The one place a finished, stopped or returned-from-a-worker tree becomes a result, so the driver, the
    CLI's partial results, the Ray paths and the service all decide the same way (``search.decide.choose``).
    """
    verdict = decide(tree.answers(), vote_key_rule(config.vote_key, tree.task.format if tree.task else ""))
    choice = choose(verdict, config, value_given)
    notes = list(notes or [])
    if interrupted and not any(n.startswith("stopped early") for n in notes):
        notes.append("stopped early: the decision is over the tree searched so far")
    return SearchResult(
        task_id=task_id,
        answer=choice.chosen.answer if choice.chosen else None,
        decided_by=choice.decision.value,
        vote_answer=verdict.vote.answer if verdict.vote else None,
        value_answer=choice.value_answer,
        verdict=verdict,
        tree=tree,
        config=config,
        stats=stats,
        notes=notes,
        error=error,
        interrupted=interrupted,
        files=dict(files or {}),
    )
