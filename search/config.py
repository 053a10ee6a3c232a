"""Search settings: one frozen, validated value object, and the enums that name the choices.

Every number that shapes a search lives here so that a run is reproducible from its ``result.json`` (which
records ``SearchConfig.to_dict()``). Validation is pydantic's, declared on the fields; errors are
``ConfigError`` and name the bad field. The default values are not here: they are the profiles'
(``search.profiles``), the one place each is written down with its source.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

__all__ = ["Mode", "Decision", "PriorRule", "BackupRule", "VoteKey", "SearchConfig", "fit_context", "ConfigError",
           "describe_errors", "Count", "PositiveCount", "Weight", "Probability", "Seconds", "Flag"]


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
    AUTO = "auto"  # VALUE when a value model was given, else VOTE


def fit_context(config: SearchConfig, window: int | None) -> SearchConfig:
    """``config`` with its context budget capped at a policy's window (in-process vLLM: ``max_model_len``).

    Why: a history longer than the engine's window gets no reply, so a path must end (``context_limit``) before
    it gets there. Unchanged when the window is unknown, no smaller, or leaves no room for a reply."""
    if window is None or window >= config.context_limit or window <= config.max_tokens:
        return config
    return config.replace(context_limit=window)


class VoteKey(str, enum.Enum):
    """Which candidate answers a vote counts as one answer.

    EXACT: answers equal as canonical answers (``jupiter.answers.canonical_answer``: spacing, case and the
    spelling of a number folded; the paper votes on the raw strings). FORMAT: also answers equal at the decimal
    places the task's format asks for (``34.6459`` and ``34.65`` for "two decimal places"), and copies of the
    format's placeholder (``@is_normal[is_normal]``) get no vote (``jupiter.answers.equivalence_key``; ours).
    """

    EXACT = "exact"
    FORMAT = "format"


class PriorRule(str, enum.Enum):
    """How a reply's PUCT prior P comes from its mean token log-probability.

    EXP: ``exp(mean log-prob)``, not normalised over siblings (the authors' reference code);
    SOFTMAX: softmax over the siblings' mean log-probs (about 2.5x less exploration at K=3);
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
    PER_CHILD: every new child is backed up from itself, live ones with 0.
    """

    EXPANSION = "expansion"
    PER_CHILD = "per-child"


#: Field types shared by every settings model of the search (``SearchConfig``, ``search.settings.JobSettings``):
#: strict, so that ``true`` is not an integer and ``"3"`` is not a number.
PositiveCount = Annotated[int, Field(strict=True, ge=1)]
Count = Annotated[int, Field(strict=True, ge=0)]
Weight = Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)]
Probability = Annotated[float, Field(strict=True, gt=0, le=1, allow_inf_nan=False)]
Seconds = Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
Flag = Annotated[bool, Field(strict=True)]


def describe_errors(exc: ValidationError, owner: str, known: Iterable[str] = (), noun: str = "field") -> str:
    """A pydantic validation error as one line: each bad field as ``owner.field`` with the value given, unknown
    fields listed by name, then the ``known`` ones (``noun``: what the owner calls its fields)."""
    unknown = [".".join(map(str, e["loc"])) for e in exc.errors() if e["type"] == "extra_forbidden"]
    known_note = f"; known: {', '.join(known)}" if known else ""
    parts = [f"{owner}: unknown {noun}(s) {', '.join(unknown)}{known_note}"] if unknown else []
    for error in exc.errors():
        if error["type"] == "extra_forbidden":
            continue
        where = ".".join(map(str, error["loc"]))
        if error["type"] == "value_error":  # our own check: its message says what was wrong with the value
            parts.append(f"{owner}.{where}: {error['ctx']['error']}")
        else:
            message = error["msg"].replace("Input should be", "must be", 1)
            parts.append(f"{owner}.{where}: {message}, got {error['input']!r}")
    return "; ".join(parts)


class SearchConfig(BaseModel):
    """Settings of one search. Units: seconds, tokens, characters.

    A field left out (or given as None) takes the ``paper`` profile's value for the config's mode
    (``search.profiles``): ``SearchConfig(mode=Mode.COLLECT)`` is the paper's collection, not inference with
    labels. Any other profile is ``search.profiles.resolve_profile``.

    Fields:
        mode: what the search is for (see ``Mode``).
        iterations: tree modes: select→expand rounds per tree; REACT/VOTE: steps per path.
        expansions: K, samples per expansion (one policy call with n = K).
        c_puct: exploration weight in PUCT; 0 selects greedily on Q (the paper's best inference rows).
        temperature, top_p, max_tokens: sampling of each reply.
        max_depth: a live node deeper than this is terminal (reference code: ``depth > 10``), so a path has at
            most ``max_depth + 1`` steps.
        max_consecutive_errors: more erroring cells than this in a row end the branch.
        repeat_retries: a reply whose cell is its parent's failed cell again, verbatim, would only fail again
            (``search.expand.repeats_failed_cell``): it is sampled again, up to this many times, at
            ``REPEAT_TEMPERATURE`` (or the search's own temperature if higher); the last sample stands.
            ``stats.repeats_resampled`` counts the replies replaced. 0: off.
        context_limit: prompt budget in tokens; a node whose history plus ``max_tokens`` exceeds it is terminal.
        chars_per_token: token estimate when the policy has no tokenizer count.
        cell_timeout: wall-clock limit of one cell; the sandbox the search runs in is built with it.
        partial_credit: COLLECT rewards answers by the share of correct sub-answers (2·share − 1).
        drop_duplicates: keep one node for sibling replies whose text is identical; the node's ``multiplicity``
            counts them, so each still counts as a vote and in the prior (``stats.duplicates_dropped``). Off
            by default (reference code: separate children), because a folded step is explored once however
            often the policy proposed it, and the vote then follows the distinct alternatives instead of the
            policy's confidence (measured: docs/search.md).
        logprob_prior: ask the backend for log-probs and use them as PUCT priors (tree modes with c_puct > 0).
        prior_rule: how a prior is made from log-probs (``PriorRule``).
        backup_rule: which new nodes are backed up (``BackupRule``).
        malformed_terminal: an unparsable reply, no code or an empty cell ends its branch; when False, in INFER
            mode only (the reference code's inference), it is scored −1 but may still be expanded (its children
            resample from the same notebook state). Other modes always end the branch.
        vote_runs: independent paths in VOTE mode.
        decision: how ``SearchResult.answer`` is chosen.
        vote_key: which candidates the vote counts as one answer (``VoteKey``).
        max_concurrent_cells: threads running cells at once (across all trees of a driver).
        leaves_per_step: tree modes: leaves selected, one after another, and expanded together in one step (one
            policy call, their cells at once); each selection skips the leaves already claimed (``search.puct.
            select``). Every leaf counts as an iteration. 1: the paper's one selection per iteration; more fills
            the batch of a backend that costs about the same per step for a few more sequences (a CPU), at the
            price of selecting without the claimed leaves' outcomes (docs/search.md).
        max_trees_in_flight: trees the batched driver advances together (at most).
        fit_trees_to_memory: admit a tree only while the sandboxes' memory budget holds every tree in flight at
            its peak of live states (``sandbox.MemoryBudget.sandboxes_that_fit``), so the budget does not
            evict states the trees still need (each eviction comes back as a replay); ``max_trees_in_flight``
            stays the upper bound. False: always ``max_trees_in_flight`` trees, whatever memory they need.
        branch_ahead: ask a node's state for its next branches (``sandbox.State.prefetch``) before the policy
            call that writes the node's children's cells, so the forks run while the model generates and the
            cells start as soon as the replies are in. It changes when states are made, never which: same
            tree, same replies. False: each child's state forks after the replies (the memory of the
            children that end up answers, not cells, is not spent).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Mode
    iterations: PositiveCount
    expansions: PositiveCount
    c_puct: Weight
    temperature: Weight
    top_p: Probability
    context_limit: PositiveCount  # before max_tokens, which is checked against it
    max_tokens: PositiveCount
    max_depth: PositiveCount
    max_consecutive_errors: Count
    repeat_retries: Count
    chars_per_token: Annotated[float, Field(strict=True, gt=0, allow_inf_nan=False)]
    cell_timeout: Seconds
    partial_credit: Flag
    drop_duplicates: Flag
    logprob_prior: Flag
    prior_rule: PriorRule
    backup_rule: BackupRule
    malformed_terminal: Flag
    vote_runs: PositiveCount
    decision: Decision
    vote_key: VoteKey
    max_concurrent_cells: PositiveCount
    leaves_per_step: PositiveCount
    max_trees_in_flight: PositiveCount
    fit_trees_to_memory: Flag
    branch_ahead: Flag

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise ConfigError(describe_errors(exc, "SearchConfig", type(self).model_fields)) from None

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, values: Any) -> Any:
        """Fill what was not given from the paper profile of the given mode (an unknown mode is reported by the
        field's own check; the defaults are then inference's)."""
        # imported here because search.profiles builds SearchConfigs: the profiles are the defaults' one source
        from search.profiles import profile_values

        given = {k: v for k, v in dict(values).items() if v is not None}
        try:
            mode = Mode(given.get("mode", Mode.INFER))
        except ValueError:
            mode = Mode.INFER
        return {"mode": mode, **profile_values("paper", mode), **given}

    @field_validator("max_tokens")
    @classmethod
    def _room_for_the_prompt(cls, value: int, info: ValidationInfo) -> int:
        limit = info.data.get("context_limit")
        if limit is not None and value >= limit:
            raise ValueError(f"{value} leaves no room for the prompt in context_limit={limit}")
        return value

    def replace(self, **changes: Any) -> SearchConfig:
        """A copy with ``changes`` applied, validated again (an unknown field is an error)."""
        unknown = set(changes) - set(type(self).model_fields)
        if unknown:
            raise ConfigError(f"SearchConfig: unknown field(s) {sorted(unknown)}")
        return type(self)(**{**dict(self), **changes})

    def to_dict(self) -> dict[str, Any]:
        """Every field, enums as their values (what ``result.json`` records)."""
        return self.model_dump(mode="json")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchConfig:
        """The config a ``to_dict`` recorded; keys this version does not know are ignored."""
        return cls(**{k: v for k, v in data.items() if k in cls.model_fields})

    @property
    def wants_logprobs(self) -> bool:
        """Log-probs cost throughput: ask for them only when a PUCT prior will use them."""
        return self.logprob_prior and self.mode.is_tree and self.c_puct > 0
