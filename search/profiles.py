"""Named sets of search settings, each setting with where it comes from.

A profile turns (name, mode) into a ``SearchConfig``. ``paper`` is the default everywhere (solve, bench,
collect, serve): every setting the seed paper or its authors' reference code fixes, and ours only where neither
does. Where the paper and the reference code disagree, the paper wins; the reference code's choice stays
reachable as a flag or field.

    from search.profiles import resolve_profile, describe_profile
    config = resolve_profile("paper", "infer", iterations=20)      # None overrides are ignored
    describe_profile("paper", "collect")["c_puct"]                  # -> Setting(1.25, "paper", "...")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sandbox.config import SandboxConfig
from search.config import BackupRule, ConfigError, Decision, Mode, PriorRule, SearchConfig, VoteKey

__all__ = ["PROFILES", "DEFAULT_PROFILE", "Setting", "describe_profile", "profile_values", "resolve_profile"]

DEFAULT_PROFILE = "paper"


@dataclass(frozen=True)
class Setting:
    """One setting of a profile: its value and its source (``paper``, ``reference code`` or ``ours``)."""

    value: Any
    source: str
    why: str = ""


PAPER = "paper"
REF = "reference code"
OURS = "ours"

# One line per setting, with its source. Every field of ``SearchConfig`` is here for every mode.
_EVERY_MODE: dict[str, Setting] = {
    "top_p": Setting(0.95, PAPER, "sampling top_p 0.95"),
    "max_tokens": Setting(1024, OURS, "the paper does not fix the reply length"),
    "context_limit": Setting(16384, OURS, "prompt budget in tokens: a node whose history plus max_tokens passes "
                                          "it is terminal"),
    "chars_per_token": Setting(3.5, OURS, "token estimate when the policy has no tokenizer count"),
    "max_consecutive_errors": Setting(3, OURS, "a branch of erroring cells ends after 3 in a row"),
    "repeat_retries": Setting(0, OURS, "neither the paper nor its code resamples a reply that repeats its "
                                       "parent's failed cell; >0 is ours (docs/search.md)"),
    "cell_timeout": Setting(SandboxConfig().timeout_s, OURS, "per-cell wall clock: the sandbox's own default "
                                                          "(sandbox.SandboxConfig.timeout_s)"),
    "partial_credit": Setting(False, PAPER, "answers are rewarded +1 / -1 against the label"),
    "logprob_prior": Setting(True, REF, "priors from the replies' token log-probs (used when c_puct > 0)"),
    "prior_rule": Setting(PriorRule.EXP, REF, "prior = exp(mean token log-prob), not normalised over siblings"),
    "backup_rule": Setting(BackupRule.EXPANSION, REF, "one zero back-up per expansion from the expanded node"),
    "malformed_terminal": Setting(False, REF, "a malformed reply is scored -1 but stays expandable"),
    "vote_runs": Setting(5, OURS, "independent paths in vote mode"),
    "vote_key": Setting(VoteKey.EXACT, PAPER, "the vote counts equal answers together (the paper: raw strings; "
                                              "ours folds spacing and number spelling); 'format' also answers "
                                              "equal at the format's precision, placeholders uncounted"),
    "max_concurrent_cells": Setting(4, OURS, "threads running cells at once"),
    "leaves_per_step": Setting(1, PAPER, "one selection (and expansion) per search iteration"),
    "max_trees_in_flight": Setting(16, OURS, "trees the batched driver advances together, at most"),
    "fit_trees_to_memory": Setting(True, OURS, "fewer trees at once when the sandboxes' memory budget holds "
                                               "fewer at their peak (evicted states come back by replay)"),
    "branch_ahead": Setting(True, OURS, "a node's K states fork while the policy writes its K cells "
                                        "(sandbox State.prefetch): execution only, the tree is the same"),
}

_TREE_COMMON: dict[str, Setting] = {
    **_EVERY_MODE,
    "expansions": Setting(3, PAPER, "K = 3 children per expansion, in collection and inference"),
    "max_depth": Setting(10, PAPER, "depth limit 10; a node is terminal when depth > 10 (reference code)"),
    "drop_duplicates": Setting(False, REF, "identical sibling replies stay separate children: a step the "
                                           "policy samples twice is explored twice (folding them into one node "
                                           "cost 12-45 points of accuracy: docs/search.md)"),
}

_PATH_COMMON: dict[str, Setting] = {
    **_EVERY_MODE,
    "iterations": Setting(25, OURS, "at most 25 turns per path"),
    "max_depth": Setting(25, OURS, "one path of at most 25 steps"),
    "expansions": Setting(1, OURS, "one reply per step"),
    "c_puct": Setting(0.0, OURS, "no tree, so no exploration term"),
    "drop_duplicates": Setting(False, OURS, "paths are independent"),
}

_PAPER_PROFILE: dict[Mode, dict[str, Setting]] = {
    Mode.INFER: {
        **_TREE_COMMON,
        "iterations": Setting(40, PAPER, "40 search iterations per task at inference"),
        "c_puct": Setting(0.0, PAPER, "c_puct 0 at inference, with and without a value model (its Table 2: "
                                      "the exploration term costs 77.82 -> 68.87 for 7B)"),
        "temperature": Setting(0.7, OURS, "sampling temperature at inference (not fixed by the paper)"),
        "decision": Setting(Decision.VOTE, PAPER, "the answer is the majority vote over the candidates"),
    },
    Mode.COLLECT: {
        **_TREE_COMMON,
        "iterations": Setting(50, PAPER, "50 iterations per task for trajectory collection"),
        "c_puct": Setting(1.25, PAPER, "c_puct 1.25 for collection"),
        "temperature": Setting(1.0, PAPER, "temperature 1.0 for collection"),
        "decision": Setting(Decision.VOTE, PAPER, "(collection is scored by its Q-values; vote for the report)"),
        "malformed_terminal": Setting(True, REF, "a malformed reply ends its branch with reward -1"),
    },
    Mode.REACT: {
        **_PATH_COMMON,
        "temperature": Setting(0.2, OURS, "near-greedy single rollout"),
        "vote_runs": Setting(1, OURS, "one path"),
        "decision": Setting(Decision.VOTE, OURS, "the path's answer"),
    },
    Mode.VOTE: {
        **_PATH_COMMON,
        "temperature": Setting(0.7, OURS, "diverse independent paths"),
        "vote_runs": Setting(5, OURS, "5 independent ReAct runs (raise it for equal-token comparisons)"),
        "decision": Setting(Decision.VOTE, PAPER, "majority vote (the paper's baseline)"),
    },
}

PROFILES = ("paper",)


def describe_profile(name: str, mode: Mode | str) -> dict[str, Setting]:
    """Every setting of the profile for ``mode``, with its source (every ``SearchConfig`` field but ``mode``)."""
    mode = Mode(mode)
    if name not in PROFILES:
        raise ConfigError(f"profile: {name!r} is not one of {list(PROFILES)}")
    return dict(_PAPER_PROFILE[mode])


def profile_values(name: str, mode: Mode | str) -> dict[str, Any]:
    """The profile's value of every setting for ``mode`` (what ``SearchConfig`` fills unset fields from)."""
    return {key: s.value for key, s in describe_profile(name, mode).items()}


def resolve_profile(name: str, mode: Mode | str, **overrides: Any) -> SearchConfig:
    """The ``SearchConfig`` of profile ``name`` for ``mode``, with ``overrides`` (None values ignored) on top."""
    mode = Mode(mode)
    values = profile_values(name, mode)
    values.update({k: v for k, v in overrides.items() if v is not None})
    values["mode"] = mode
    return SearchConfig(**values)
