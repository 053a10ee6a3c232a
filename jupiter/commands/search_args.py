"""The search-settings flags that ``solve``, ``bench`` and ``search/collect.py`` share, and their resolution.

Why one module: the same flag must mean the same thing in every command, default to the same profile
(``search.profiles``: the paper's settings), and fail with a message that names the flag the user typed, not
an internal field. ``--print-config`` shows what a command would run with, as JSON, before any work.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Iterable

__all__ = ["add_search_arguments", "config_from_args", "print_config", "flag_message", "FIELD_FLAGS"]

#: SearchConfig field -> the flag that sets it
FIELD_FLAGS = {
    "mode": "--mode",
    "iterations": "--iterations",
    "expansions": "--expansions",
    "max_depth": "--max-depth",
    "c_puct": "--c-puct",
    "decision": "--decision",
    "temperature": "--temperature",
    "top_p": "--top-p",
    "max_tokens": "--max-tokens",
    "cell_timeout": "--cell-timeout",
    "max_trees_in_flight": "--concurrency",
    "vote_runs": "--vote-runs",
}

MODES = ("infer", "collect", "react", "vote")


def add_search_arguments(parser: argparse.ArgumentParser, modes: Iterable[str] = MODES,
                         default_mode: str = "infer", with_mode: bool = True) -> None:
    """Add the profile, mode and search-setting flags. Unset flags stay None: the profile decides them."""
    from search.profiles import DEFAULT_PROFILE, PROFILES

    group = parser.add_argument_group("search settings (unset: the profile's value; see --print-config)")
    group.add_argument("--profile", choices=PROFILES, default=DEFAULT_PROFILE,
                       help="named settings: 'paper' = the seed paper and its reference code (docs/search.md "
                            "lists each setting and its source); 'v0.1' = Jupiter 0.1's rules, for comparison")
    if with_mode:
        group.add_argument("--mode", choices=tuple(modes), default=default_mode,
                           help="infer: tree search, answer by vote (or value); collect: tree search scored "
                                "against the label (training data); react: one ReAct path; vote: majority "
                                "over independent ReAct paths")
    group.add_argument("--iterations", type=int, default=None,
                       help="tree modes: select-expand rounds per task (paper: 40 infer, 50 collect); "
                            "react/vote: most turns per path (25)")
    group.add_argument("--expansions", type=int, default=None, help="samples per expansion K (paper: 3)")
    group.add_argument("--max-depth", type=int, default=None,
                       help="a live node deeper than this is terminal (paper: 10)")
    group.add_argument("--c-puct", type=float, default=None,
                       help="PUCT exploration weight (paper: 0 at inference, 1.25 for collection)")
    group.add_argument("--decision", choices=("vote", "value", "auto"), default=None,
                       help="how the answer is picked: majority vote (paper), highest value, or auto "
                            "(value with a value model, else vote)")
    group.add_argument("--temperature", type=float, default=None,
                       help="sampling temperature (paper: 1.0 for collection; 0.7 at inference; 0.2 react)")
    group.add_argument("--top-p", type=float, default=None, help="nucleus sampling top_p (paper: 0.95)")
    group.add_argument("--max-tokens", type=int, default=None, help="most tokens per reply (1024)")
    group.add_argument("--cell-timeout", type=float, default=None, help="seconds per cell (180)")
    group.add_argument("--vote-runs", type=int, default=None,
                       help="vote mode: independent paths (5); raise it to match a tree's token budget")
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
        fallback = "--" + field.replace("_", "-") if dash_unknown else match.group(0)
        return names.get(field, fallback)

    return re.sub(r"\b(?:" + "|".join(map(re.escape, owners)) + r")\.(\w+)", repl, message)


def config_from_args(args: argparse.Namespace, has_value: bool = False, **extra: Any) -> Any:
    """The ``SearchConfig`` the flags ask for: the profile's settings for the mode, flags on top.

    ``extra`` holds command-specific overrides (None ignored). Raises ``jupiter.task.TaskError`` naming the
    flag when a value is out of range.
    """
    from jupiter.task import TaskError
    from search import ConfigError, Mode
    from search.profiles import resolve_profile

    mode = Mode(getattr(args, "mode", "infer"))
    overrides: dict[str, Any] = {field: getattr(args, field, None) for field in FIELD_FLAGS if field != "mode"}
    overrides.update(extra)
    if not mode.is_tree:  # the baselines take one reply per step and no PUCT
        for name in ("expansions", "c_puct"):
            overrides.pop(name, None)
    if (args.profile == "v0.1" and has_value and mode is Mode.INFER and overrides.get("c_puct") is None):
        overrides["c_puct"] = 0.0  # Jupiter 0.1 switched to value-guided selection with a value model
    try:
        return resolve_profile(args.profile, mode, **overrides)
    except ConfigError as exc:
        raise TaskError(flag_message(str(exc))) from None


def print_config(args: argparse.Namespace, config: Any, out: Any = None) -> None:
    """Write the resolved configuration and each profile setting's source as one JSON object."""
    from search.profiles import describe_profile

    sources = {name: {"value": getattr(s.value, "value", s.value), "source": s.source, "why": s.why}
               for name, s in describe_profile(args.profile, config.mode).items()}
    given = {field: getattr(args, field) for field in FIELD_FLAGS
             if field != "mode" and getattr(args, field, None) is not None}
    record = {"profile": args.profile, "config": config.to_dict(), "from_flags": given, "profile_settings": sources}
    print(json.dumps(record, indent=2, default=str), file=out or sys.stdout)
