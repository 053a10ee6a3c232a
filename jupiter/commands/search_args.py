"""The search settings of ``solve`` and ``bench``: flags, their resolution into a ``SearchConfig``, and
``--print-config``.

The flags are made here from ``search.settings.LocalSettings`` (``add_search_arguments``: the search layer has no
argparse), so the same flag means the same thing in every command and in a service job. Errors name the flag the
user typed, not an internal field. ``--print-config`` shows what a command would run with, as JSON, before any
work.
"""

from __future__ import annotations

import argparse
import enum
import json
import re
import sys
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupiter.task import TaskError
from search import ConfigError
from search.checkpoints import DEFAULT_EVERY_S
from search.profiles import DEFAULT_PROFILE, PROFILES, describe_profile
from search.settings import LocalSettings, parse_job_settings, resolve_settings

__all__ = ["add_checkpoint_argument", "add_search_arguments", "add_value_dtype_argument", "add_value_model_argument",
           "settings_given", "settings_from_args", "config_from_args", "print_config", "flag_message", "FIELD_FLAGS"]


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


#: SearchConfig field -> the flag that sets it: one per ``LocalSettings`` field, and ``jupiter bench``'s
#: ``--concurrency`` for the trees searched together
FIELD_FLAGS = {**{name: _flag(name) for name in LocalSettings.model_fields if name != "seed"},
               "max_trees_in_flight": "--concurrency"}


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


def _value_model(text: str) -> Path | None:
    from search.loaders import LoadError, value_model_path

    try:
        return value_model_path(text)
    except LoadError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_value_model_argument(parser: argparse.ArgumentParser) -> None:
    """``--value-model default | none | DIR`` (``search.loaders.value_model_path``), parsed into a folder or None."""
    parser.add_argument("--value-model", type=_value_model, default=None, metavar="default|none|DIR",
                        help="value model that scores nodes in infer mode: default (the one that ships), none "
                             "(the default: no value model), or a folder written by 'jupiter value train'")


def add_value_dtype_argument(parser: argparse.ArgumentParser) -> None:
    """``--value-dtype``: the value model's compute dtype. Why an option: on a CPU the scorer computes in float32
    (``value_model.model.pick_dtype``), but on CPUs with bfloat16 instructions bfloat16 scores about twice as fast,
    and the shipped models were trained and ranked in it (data/value_model/curve/README.md)."""
    parser.add_argument("--value-dtype", choices=("float32", "bfloat16"), default=None,
                        help="the value model's compute dtype (default: bfloat16 on a GPU, float32 on a CPU)")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 or more seconds")
    return value


def add_checkpoint_argument(parser: argparse.ArgumentParser, where: str) -> None:
    """``--checkpoint-every SECONDS``: how often a tree in flight is saved for a rerun to continue."""
    parser.add_argument("--checkpoint-every", type=_seconds, default=DEFAULT_EVERY_S, metavar="SECONDS",
                        help=f"save each tree in flight to {where} at most this often (0: every step), so that a "
                             "rerun after a kill continues it")


def settings_given(args: argparse.Namespace) -> LocalSettings:
    """The settings the flags of ``add_search_arguments`` give (unset flags None; a command without ``--mode``
    has its mode set in ``args`` by the command). ``SettingsError`` names the setting of a value out of range
    (``flag_message(..., owners=("settings",))`` turns it into the flag)."""
    given = {name: getattr(args, name, None) for name in LocalSettings.model_fields}
    settings = parse_job_settings({k: v for k, v in given.items() if v is not None}, LocalSettings)
    assert isinstance(settings, LocalSettings)  # model_validate of LocalSettings
    return settings


def settings_from_args(args: argparse.Namespace) -> LocalSettings:
    """``settings_given``, with a value out of range raised as ``jupiter.task.TaskError`` naming its flag."""
    try:
        return settings_given(args)
    except ConfigError as exc:
        raise TaskError(flag_message(str(exc), owners=("settings",))) from None


def config_from_args(args: argparse.Namespace, **extra: Any) -> Any:
    """The ``SearchConfig`` the flags ask for: the profile's settings for the mode, flags on top.

    ``extra`` holds command-specific ``SearchConfig`` overrides (None ignored). Raises ``jupiter.task.TaskError``
    naming the flag when a value is out of range.
    """
    settings = settings_from_args(args)
    try:
        return resolve_settings(settings, args.profile, **extra)
    except ConfigError as exc:
        raise TaskError(flag_message(str(exc))) from None


def print_config(args: argparse.Namespace, config: Any, out: Any = None) -> None:
    """Write the resolved configuration and each profile setting's source as one JSON object."""
    sources = {name: {"value": s.value, "source": s.source, "why": s.why}  # enums are str: JSON writes their value
               for name, s in describe_profile(args.profile, config.mode).items()}
    given = {name: value for name, value in settings_from_args(args).model_dump(mode="json").items()
             if name not in ("mode", "seed") and value is not None}
    record = {"profile": args.profile, "config": config.to_dict(), "from_flags": given, "profile_settings": sources}
    print(json.dumps(record, indent=2, default=str), file=out or sys.stdout)
