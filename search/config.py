"""Search settings: one frozen, validated dataclass, and the enums that name the choices.

Every number that shapes a search lives here so that a run is reproducible from its ``result.json`` (which
records ``SearchConfig.to_dict()``). Errors name the bad field.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["Mode", "Decision", "SearchConfig", "ConfigError"]


class ConfigError(ValueError):
    """A search setting is out of range; the message names the field."""


class Mode(str, enum.Enum):
    """What the search is for.

    COLLECT: trajectory collection; answers are scored against the task's label (+1 / −1).
    INFER: inference; nodes are scored by the value model (0 without one).
    REACT: the ReAct baseline, one greedy-ish path (temperature 0.2, ≤ 25 turns).
    VOTE: majority voting over independent ReAct runs (5 runs, temperature 0.7).
    """

    COLLECT = "collect"
    INFER = "infer"
    REACT = "react"
    VOTE = "vote"

    @property
    def is_tree(self) -> bool:
        """PUCT tree search (COLLECT, INFER) as opposed to independent paths (REACT, VOTE)."""
        return self in (Mode.COLLECT, Mode.INFER)


class Decision(str, enum.Enum):
    """How the final answer is picked among the candidates (both are always recorded)."""

    AUTO = "auto"  # VALUE when a value model was given, else VOTE
    VOTE = "vote"  # majority over canonical answers
    VALUE = "value"  # the candidate with the highest value


@dataclass(frozen=True)
class SearchConfig:
    """Settings of one search. Units: seconds, tokens, characters.

    Fields:
        mode: what the search is for (see ``Mode``).
        iterations: tree modes: select→expand rounds per tree; REACT/VOTE: steps per path.
        expansions: K, samples per expansion (one policy call with n = K).
        c_puct: exploration weight in PUCT; 0 selects greedily on Q.
        temperature, top_p, max_tokens: sampling of each reply.
        max_depth: a path has at most this many steps; a node at this depth is not expanded.
        max_consecutive_errors: more erroring cells than this in a row end the branch.
        context_limit: prompt budget in tokens; a node whose history plus ``max_tokens`` exceeds it is terminal.
        chars_per_token: token estimate when the policy has no tokenizer count.
        cell_timeout: wall-clock limit of one cell.
        partial_credit: COLLECT rewards answers by the share of correct sub-answers (2·share − 1).
        drop_duplicates: drop sibling replies whose text is identical (counted in stats).
        logprob_prior: ask the backend for log-probs and use them as PUCT priors (tree modes with c_puct > 0).
        vote_runs: independent paths in VOTE mode.
        decision: how ``SearchResult.answer`` is chosen.
        max_concurrent_cells: threads running cells at once (across all trees of a driver).
        max_trees_in_flight: trees the batched driver advances together.
    """

    mode: Mode = Mode.INFER
    iterations: int = 40
    expansions: int = 3
    c_puct: float = 1.25
    temperature: float = 0.7
    top_p: float = 0.95
    max_tokens: int = 1024
    max_depth: int = 10
    max_consecutive_errors: int = 3
    context_limit: int = 16384
    chars_per_token: float = 3.5
    cell_timeout: float = 180.0
    partial_credit: bool = False
    drop_duplicates: bool = True
    logprob_prior: bool = True
    vote_runs: int = 5
    decision: Decision = Decision.AUTO
    max_concurrent_cells: int = 4
    max_trees_in_flight: int = 16

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", Mode(self.mode))
        except ValueError:
            raise ConfigError(f"SearchConfig.mode: {self.mode!r} is not one of {[m.value for m in Mode]}") from None
        try:
            object.__setattr__(self, "decision", Decision(self.decision))
        except ValueError:
            raise ConfigError(
                f"SearchConfig.decision: {self.decision!r} is not one of {[d.value for d in Decision]}"
            ) from None
        positive_ints = ("iterations", "expansions", "max_tokens", "max_depth", "context_limit", "vote_runs",
                         "max_concurrent_cells", "max_trees_in_flight")
        for name in positive_ints:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"SearchConfig.{name}: must be an integer >= 1, got {value!r}")
        if isinstance(self.max_consecutive_errors, bool) or not isinstance(self.max_consecutive_errors, int) \
                or self.max_consecutive_errors < 0:
            raise ConfigError(
                f"SearchConfig.max_consecutive_errors: must be an integer >= 0, got {self.max_consecutive_errors!r}"
            )
        self._check_float("c_puct", low=0.0)
        self._check_float("temperature", low=0.0)
        self._check_float("top_p", low=0.0, high=1.0, low_open=True)
        self._check_float("chars_per_token", low=0.0, low_open=True)
        self._check_float("cell_timeout", low=0.0, low_open=True)
        if self.max_tokens >= self.context_limit:
            raise ConfigError(
                f"SearchConfig.max_tokens: {self.max_tokens} leaves no room for the prompt in "
                f"context_limit={self.context_limit}"
            )

    def _check_float(self, name: str, low: float, high: float | None = None, low_open: bool = False) -> None:
        value = getattr(self, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"SearchConfig.{name}: must be a finite number, got {value!r}")
        if value < low or (low_open and value == low) or (high is not None and value > high):
            bound = f"> {low}" if low_open else f">= {low}"
            upper = f" and <= {high}" if high is not None else ""
            raise ConfigError(f"SearchConfig.{name}: must be {bound}{upper}, got {value!r}")

    def replace(self, **changes: Any) -> "SearchConfig":
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ConfigError(f"SearchConfig: unknown field(s) {sorted(unknown)}")
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["mode"] = self.mode.value
        out["decision"] = self.decision.value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SearchConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def wants_logprobs(self) -> bool:
        """Log-probs cost throughput: ask for them only when a PUCT prior will use them."""
        return self.logprob_prior and self.mode.is_tree and self.c_puct > 0
