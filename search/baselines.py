"""The baselines, run by the same engine: ReAct and majority voting over independent ReAct runs.

They differ from the tree search only in their settings: one path per run (n = 1 per step, no PUCT), a fixed
temperature and a turn budget. Running them through the same driver makes the comparison fair: same prompt,
parser, sandbox, limits, batching and cost accounting.
"""

from __future__ import annotations

from typing import Any

from search.config import Mode, SearchConfig
from search.profiles import DEFAULT_PROFILE, profile_values, resolve_profile

__all__ = ["REACT_TURNS", "react_config", "vote_config", "config_for_mode"]

#: ReAct's turn budget (the default profile's)
REACT_TURNS: int = profile_values(DEFAULT_PROFILE, Mode.REACT)["iterations"]


def react_config(**overrides: Any) -> SearchConfig:
    """ReAct: one path, temperature 0.2, at most ``REACT_TURNS`` turns (the default profile's ReAct)."""
    return resolve_profile(DEFAULT_PROFILE, Mode.REACT, **overrides)


def vote_config(runs: int = 5, **overrides: Any) -> SearchConfig:
    """Majority voting: ``runs`` independent ReAct paths at temperature 0.7, answers decided by vote."""
    return resolve_profile(DEFAULT_PROFILE, Mode.VOTE, vote_runs=runs, **overrides)


def config_for_mode(mode: Mode | str, profile: str = DEFAULT_PROFILE, **overrides: Any) -> SearchConfig:
    """The settings of ``mode`` in ``profile`` (``search.profiles``), with ``overrides`` (None ignored) applied."""
    return resolve_profile(profile, mode, **overrides)
