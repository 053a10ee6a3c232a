"""The settings one job chooses, declared once.

``JobSettings`` is what a user may set for one search: the flags of ``jupiter solve`` / ``jupiter bench`` /
``search/collect.py`` are made from its fields (``jupiter.commands.search_args.add_search_arguments``), the
service's ``settings`` form field is validated by it and documented from it on the OpenAPI page, and the client
checks the names it sends against it. ``LocalSettings`` adds what a server decides for its jobs (its host's
per-cell time limit), so a local run has the flag and ``--server`` refuses it. A field left None takes the
profile's value for the mode (``search.profiles``), and ``resolve_settings`` turns the settings into a validated
``SearchConfig``. No argparse here: the flags are the commands' (``jupiter.commands.search_args``).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from search.config import (
    ConfigError,
    Count,
    Decision,
    Mode,
    PositiveCount,
    Probability,
    SearchConfig,
    Seconds,
    VoteKey,
    Weight,
    describe_errors,
)
from search.profiles import DEFAULT_PROFILE, resolve_profile

__all__ = ["JobSettings", "LocalSettings", "SettingsError", "parse_job_settings", "resolve_settings"]


class SettingsError(ConfigError):
    """Settings a job cannot run with; the message names the setting (``settings.<name>``)."""


class JobSettings(BaseModel):
    """The search settings of one job. None: the profile's value for the mode (the paper's by default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Mode = Field(Mode.INFER, description="infer: tree search, answer by vote (or value); collect: tree search "
                                               "scored against the label (training data); react: one ReAct path; "
                                               "vote: majority over independent ReAct paths")
    iterations: PositiveCount | None = Field(None, description="tree modes: select-expand rounds per task; "
                                                               "react/vote: most turns per path")
    expansions: PositiveCount | None = Field(None, description="samples per expansion K (tree modes)")
    max_depth: PositiveCount | None = Field(None, description="a live node deeper than this is terminal")
    c_puct: Weight | None = Field(None, description="PUCT exploration weight (tree modes)")
    decision: Decision | None = Field(None, description="how the answer is picked: majority vote, highest value, "
                                                        "or auto (value with a value model, else vote)")
    vote_key: VoteKey | None = Field(None, description="exact: the vote counts equal answers together; format: "
                                                       "also answers equal at the decimal places the format asks "
                                                       "for, and copies of its placeholder get no vote")
    temperature: Weight | None = Field(None, description="sampling temperature")
    top_p: Probability | None = Field(None, description="nucleus sampling top_p")
    max_tokens: PositiveCount | None = Field(None, description="most tokens per reply")
    repeat_retries: Count | None = Field(None, description="samples again, up to this many times, a reply that "
                                                          "repeats its parent's failed cell verbatim (0: off)")
    leaves_per_step: PositiveCount | None = Field(None, description="tree modes: leaves selected and expanded "
                                                                   "together per step, each selection skipping "
                                                                   "the ones already claimed (1: one per "
                                                                   "iteration, as the paper)")
    vote_runs: PositiveCount | None = Field(None, description="vote mode: independent paths; raise it to match a "
                                                              "tree's token budget")
    seed: typing.Annotated[int, Field(strict=True)] | None = Field(
        None, description="seeds the model's sampling and the search's tie-breaks, 0 when unset (same seed, "
                           "same tree with a seed-deterministic backend)")

    def overrides(self) -> dict[str, Any]:
        """The search settings given (not None), mode and seed aside: what goes on top of the profile."""
        return {k: v for k, v in self if v is not None and k not in ("mode", "seed")}


class LocalSettings(JobSettings):
    """A run on this machine: a job's settings and what a server otherwise decides for its jobs."""

    cell_timeout: Seconds | None = Field(None, description="seconds per cell")


def parse_job_settings(data: Mapping[str, Any], model: type[JobSettings] = JobSettings) -> JobSettings:
    """Validate a settings object; ``SettingsError`` names each bad setting as ``settings.<name>``."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, "settings", model.model_fields, noun="setting")) from None


def resolve_settings(settings: JobSettings, profile: str = DEFAULT_PROFILE, **extra: Any) -> SearchConfig:
    """The ``SearchConfig`` for ``settings``: the profile's values for the mode, the settings on top.

    ``extra`` are SearchConfig fields the caller decides (a server's trees in flight; None ignored). The
    baselines take one reply per step and no PUCT, so ``expansions``, ``c_puct`` and ``leaves_per_step`` are not
    applied to them. Raises ``ConfigError`` naming the ``SearchConfig`` field.
    """
    overrides = {**settings.overrides(), **{k: v for k, v in extra.items() if v is not None}}
    if not settings.mode.is_tree:
        for name in ("expansions", "c_puct", "leaves_per_step"):
            overrides.pop(name, None)
    return resolve_profile(profile, settings.mode, **overrides)
