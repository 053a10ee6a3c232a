"""The baselines, run by the same engine: ReAct and majority voting over independent ReAct runs.

They differ from the tree search only in their settings: one path per run (n = 1 per step, no PUCT), a fixed
temperature and a turn budget. Running them through the same driver makes the comparison fair: same prompt,
parser, sandbox, limits, batching and cost accounting.
"""

from __future__ import annotations

from typing import Any

from search.config import Decision, Mode, SearchConfig

__all__ = ["REACT_TURNS", "react_config", "vote_config", "config_for_mode"]

#: ReAct's turn budget
REACT_TURNS = 25


def react_config(**overrides: Any) -> SearchConfig:
    """ReAct: one path, temperature 0.2, at most 25 turns."""
    values: dict[str, Any] = dict(mode=Mode.REACT, temperature=0.2, iterations=REACT_TURNS, max_depth=REACT_TURNS,
                                  expansions=1, vote_runs=1, drop_duplicates=False, decision=Decision.VOTE)
    values.update(overrides)
    return SearchConfig(**values)


def vote_config(runs: int = 5, **overrides: Any) -> SearchConfig:
    """Majority voting: ``runs`` independent ReAct paths at temperature 0.7, answers decided by vote."""
    values: dict[str, Any] = dict(mode=Mode.VOTE, temperature=0.7, iterations=REACT_TURNS, max_depth=REACT_TURNS,
                                  expansions=1, vote_runs=runs, drop_duplicates=False, decision=Decision.VOTE)
    values.update(overrides)
    return SearchConfig(**values)


def config_for_mode(mode: Mode | str, **overrides: Any) -> SearchConfig:
    """The default settings of a mode, with ``overrides`` (None values are ignored) applied."""
    mode = Mode(mode)
    given = {k: v for k, v in overrides.items() if v is not None}
    if mode is Mode.REACT:
        return react_config(**given)
    if mode is Mode.VOTE:
        return vote_config(**given)
    return SearchConfig(mode=mode, **given)
