"""Search settings: one frozen, validated dataclass, and the enums that name the choices.

Every number that shapes a search lives here so that a run is reproducible from its ``result.json`` (which
records ``SearchConfig.to_dict()``). Errors name the bad field.
"""

from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

__all__ = ["Mode", "Decision", "PriorRule", "BackupRule", "SearchConfig", "ConfigError"]


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

    VOTE = "vote"  # majority over canonical answers, duplicates counted (the paper's reported decision)
    VALUE = "value"  # the candidate with the highest value
    AUTO = "auto"  # VALUE when a value model was given, else VOTE (Jupiter 0.1's default)


class PriorRule(str, enum.Enum):
    """How a reply's PUCT prior P comes from its mean token log-probability.

    EXP: ``exp(mean log-prob)``, not normalised over siblings (the authors' reference code);
    SOFTMAX: softmax over the siblings' mean log-probs (Jupiter 0.1; about 2.5x less exploration at K=3);
    UNIFORM: 1/K whatever the log-probs say.
    Without log-probs every rule falls back to 1/K.
    """

    EXP = "exp"
    SOFTMAX = "softmax"
    UNIFORM = "uniform"


class BackupRule(str, enum.Enum):
    """Which new nodes are backed up after an expansion.

    EXPANSION: every child with a value of its own (a reward, a failure, a value-model estimate) is backed up
    from itself; live children with no estimate are not, and the expanded node gets ONE back-up of 0 for them
    (the authors' reference code: intermediate Q targets are not diluted by K zero visits);
    PER_CHILD: every new child is backed up from itself, live ones with 0 (Jupiter 0.1).
    """

    EXPANSION = "expansion"
    PER_CHILD = "per-child"


@dataclass(frozen=True)
class SearchConfig:
    """Settings of one search. Units: seconds, tokens, characters.

    Fields:
        mode: what the search is for (see ``Mode``).
        iterations: tree modes: select→expand rounds per tree; REACT/VOTE: steps per path.
        expansions: K, samples per expansion (one policy call with n = K).
        c_puct: exploration weight in PUCT; 0 selects greedily on Q (the paper's best inference rows).
        temperature, top_p, max_tokens: sampling of each reply.
        max_depth: a live node deeper than this is terminal (reference code: ``depth > 10``), so a path has at
            most ``max_depth + 1`` steps.
        max_consecutive_errors: more erroring cells than this in a row end the branch.
        context_limit: prompt budget in tokens; a node whose history plus ``max_tokens`` exceeds it is terminal.
        chars_per_token: token estimate when the policy has no tokenizer count.
        cell_timeout: wall-clock limit of one cell.
        partial_credit: COLLECT rewards answers by the share of correct sub-answers (2·share − 1).
        drop_duplicates: keep one node for sibling replies whose text is identical; the node's ``multiplicity``
            counts them, so each still counts as a vote and in the prior (``stats.duplicates_dropped``). Off
            by default (reference code: separate children), because a folded step is explored once however
            often the policy proposed it, and the vote then follows the distinct alternatives instead of the
            policy's confidence (measured in benchmarks/quality: docs/search.md).
        logprob_prior: ask the backend for log-probs and use them as PUCT priors (tree modes with c_puct > 0).
        prior_rule: how a prior is made from log-probs (``PriorRule``).
        backup_rule: which new nodes are backed up (``BackupRule``).
        malformed_terminal: an unparsable reply, no code or an empty cell ends its branch; when False, in INFER
            mode only (the reference code's inference), it is scored −1 but may still be expanded (its children
            resample from the same notebook state). Other modes always end the branch.
        vote_runs: independent paths in VOTE mode.
        decision: how ``SearchResult.answer`` is chosen.
        max_concurrent_cells: threads running cells at once (across all trees of a driver).
        max_trees_in_flight: trees the batched driver advances together.
    """

    # Defaults are the paper's settings (``search.profiles`` says where each comes from). The three that differ
    # between modes (iterations, c_puct, temperature) default to None, which means "the paper profile's value
    # for this mode": SearchConfig(mode=Mode.COLLECT) is the paper's collection, not inference with labels.
    mode: Mode = Mode.INFER
    iterations: int = None  # type: ignore[assignment]  # infer 40, collect 50, react/vote 25
    expansions: int = 3
    c_puct: float = None  # type: ignore[assignment]  # infer 0, collect 1.25
    temperature: float = None  # type: ignore[assignment]  # infer 0.7, collect 1.0, react 0.2, vote 0.7
    top_p: float = 0.95
    max_tokens: int = 1024
    max_depth: int = 10
    max_consecutive_errors: int = 3
    context_limit: int = 16384
    chars_per_token: float = 3.5
    cell_timeout: float = 180.0
    partial_credit: bool = False
    drop_duplicates: bool = False
    logprob_prior: bool = True
    prior_rule: PriorRule = PriorRule.EXP
    backup_rule: BackupRule = BackupRule.EXPANSION
    malformed_terminal: bool = False
    vote_runs: int = 5
    decision: Decision = Decision.VOTE
    max_concurrent_cells: int = 4
    max_trees_in_flight: int = 16

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "mode", Mode(self.mode))
        except ValueError:
            raise ConfigError(f"SearchConfig.mode: {self.mode!r} is not one of {[m.value for m in Mode]}") from None
        if self.iterations is None or self.c_puct is None or self.temperature is None:
            from search.profiles import describe_profile  # lazy: profiles builds on this module

            paper = describe_profile("paper", self.mode)
            for name in ("iterations", "c_puct", "temperature"):
                if getattr(self, name) is None:
                    object.__setattr__(self, name, paper[name].value if name in paper else 0.0)
        for name, kind in (("decision", Decision), ("prior_rule", PriorRule), ("backup_rule", BackupRule)):
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                raise ConfigError(
                    f"SearchConfig.{name}: {getattr(self, name)!r} is not one of {[d.value for d in kind]}"
                ) from None
        for name in ("partial_credit", "drop_duplicates", "logprob_prior", "malformed_terminal"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"SearchConfig.{name}: must be true or false, got {getattr(self, name)!r}")
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
        for name in ("mode", "decision", "prior_rule", "backup_rule"):
            out[name] = getattr(self, name).value
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SearchConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def wants_logprobs(self) -> bool:
        """Log-probs cost throughput: ask for them only when a PUCT prior will use them."""
        return self.logprob_prior and self.mode.is_tree and self.c_puct > 0
