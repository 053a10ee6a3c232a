"""The settings one job chooses, declared once.

``JobSettings`` is what a user may set for one search: the flags of ``jupiter solve`` / ``jupiter bench`` /
``search/collect.py`` are made from its fields (``add_search_arguments``), the service's ``settings`` form field
is validated by it and documented from it on the OpenAPI page, and the client checks the names it sends
against it. ``LocalSettings`` adds what a server decides for its jobs (its host's per-cell time limit), so a
local run has the flag and ``--server`` refuses it. A field left None takes the profile's value for the mode
(``search.profiles``), and ``resolve_settings`` turns the settings into a validated ``SearchConfig``.
"""

from __future__ import annotations

import argparse
import enum
import re
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
from search.profiles import DEFAULT_PROFILE, PROFILES, describe_profile, resolve_profile

__all__ = ["JobSettings", "LocalSettings", "SettingsError", "parse_job_settings", "settings_from_args",
           "resolve_settings",
           "add_search_arguments", "FIELD_FLAGS", "flag_message"]


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


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: SearchConfig field -> the flag that sets it: one per ``LocalSettings`` field, and ``jupiter bench``'s
#: ``--concurrency`` for the trees searched together
FIELD_FLAGS = {**{name: _flag(name) for name in LocalSettings.model_fields if name != "seed"},
               "max_trees_in_flight": "--concurrency"}


def parse_job_settings(data: Mapping[str, Any], model: type[JobSettings] = JobSettings) -> JobSettings:
    """Validate a settings object; ``SettingsError`` names each bad setting as ``settings.<name>``."""
    try:
        return model.model_validate(dict(data))
    except ValidationError as exc:
        raise SettingsError(describe_errors(exc, "settings", model.model_fields, noun="setting")) from None


def settings_from_args(args: argparse.Namespace) -> LocalSettings:
    """The settings the flags of ``add_search_arguments`` give (unset flags None; a command without ``--mode``
    has its mode set in ``args`` by the command). ``SettingsError`` names the setting of a value out of range
    (``flag_message(..., owners=("settings",))`` turns it into the flag)."""
    given = {name: getattr(args, name, None) for name in LocalSettings.model_fields}
    settings = parse_job_settings({k: v for k, v in given.items() if v is not None}, LocalSettings)
    assert isinstance(settings, LocalSettings)  # model_validate of LocalSettings
    return settings


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


def _kind(annotation: Any) -> Any:
    """The Python type a flag of this annotation parses (int, float, bool or an enum)."""
    if isinstance(annotation, type) and (issubclass(annotation, enum.Enum) or annotation in (int, float, bool)):
        return annotation
    for arg in typing.get_args(annotation):
        found = _kind(arg)
        if found is not None:
            return found
    return None


#: settings that only some modes use: their help shows the profile's value in those modes only
_USED_IN = {"expansions": ("infer", "collect"), "c_puct": ("infer", "collect"),
            "leaves_per_step": ("infer", "collect"), "vote_runs": ("vote",)}


def _profile_note(name: str, modes: tuple[str, ...]) -> str:
    """``(paper: infer 40, collect 50)``: the default profile's value of a setting in each mode."""
    modes = tuple(m for m in modes if m in _USED_IN.get(name, modes)) or modes
    values = {mode: describe_profile(DEFAULT_PROFILE, mode)[name].value for mode in modes}
    shown = {mode: v.value if isinstance(v, enum.Enum) else v for mode, v in values.items()}
    if len(set(map(str, shown.values()))) == 1:
        return f" ({DEFAULT_PROFILE}: {next(iter(shown.values()))})"
    return f" ({DEFAULT_PROFILE}: " + ", ".join(f"{mode} {value}" for mode, value in shown.items()) + ")"


def add_search_arguments(parser: argparse.ArgumentParser,
                         modes: tuple[str, ...] = ("infer", "collect", "react", "vote"), default_mode: str = "infer",
                         with_mode: bool = True,
                         fields: tuple[str, ...] | None = None, aliases: Mapping[str, str] | None = None,
                         title: str = "search settings (unset: the profile's value; see --print-config)") -> None:
    """Add ``--profile``, ``--mode`` (with ``with_mode``), a flag per ``LocalSettings`` field (``fields``: only
    these; ``--seed`` always) and ``--print-config``. Unset flags stay None: the profile decides them; each flag's help
    shows the default profile's value in ``modes``. ``aliases``: extra short names (field -> ``-k``)."""
    group = parser.add_argument_group(title)
    group.add_argument("--profile", choices=PROFILES, default=DEFAULT_PROFILE,
                       help="named settings: 'paper' = the seed paper and its reference code (docs/search.md "
                            "lists each setting and its source)")
    for name, info in LocalSettings.model_fields.items():
        if (fields is not None and name not in fields and name != "seed") or (name == "mode" and not with_mode):
            continue
        kind = _kind(info.annotation)
        names = [_flag(name)] + ([aliases[name]] if aliases and name in aliases else [])
        if name == "mode":
            group.add_argument(*names, choices=tuple(modes), default=default_mode, help=info.description)
        elif name == "seed":  # not a profile setting: its default is the run's, 0
            group.add_argument(*names, type=int, default=0, help=info.description)
        elif isinstance(kind, type) and issubclass(kind, enum.Enum):
            group.add_argument(*names, choices=tuple(m.value for m in kind), default=None,
                               help=(info.description or "") + _profile_note(name, modes))
        else:
            group.add_argument(*names, type=kind, default=None,
                               help=(info.description or "") + _profile_note(name, modes))
    group.add_argument("--print-config", action="store_true",
                       help="print the resolved settings (and where each comes from) as JSON and exit")


def flag_message(message: str, flags: dict[str, str] | None = None, owners: tuple[str, ...] = ("SearchConfig",),
                 dash_unknown: bool = False) -> str:
    """Rewrite ``Owner.field`` in an error message as the flag the user would type.

    ``flags``: a command's own names where they differ from ``FIELD_FLAGS``; ``owners``: the config classes
    whose fields are meant; ``dash_unknown``: a field with no listed flag becomes ``--field-name`` (for
    commands whose every field is a flag of that name), else it stays as written.
    """
    names = {**FIELD_FLAGS, **(flags or {})}

    def repl(match: re.Match[str]) -> str:
        field = match.group(1)
        fallback = _flag(field) if dash_unknown else match.group(0)
        return names.get(field, fallback)

    return re.sub(r"\b(?:" + "|".join(map(re.escape, owners)) + r")\.(\w+)", repl, message)
