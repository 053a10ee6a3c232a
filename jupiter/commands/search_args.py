"""The search settings of ``solve`` and ``bench``: flags, their resolution into a ``SearchConfig``, and
``--print-config``.

The flags themselves are made from ``search.settings.LocalSettings`` (``add_search_arguments``), so the same
flag means the same thing in every command and in a service job. Errors name the flag the user typed, not an
internal field. ``--print-config`` shows what a command would run with, as JSON, before any work.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from jupiter.task import TaskError
from search import ConfigError
from search import settings as search_settings
from search.checkpoints import DEFAULT_EVERY_S
from search.profiles import describe_profile
from search.settings import FIELD_FLAGS, LocalSettings, add_search_arguments, flag_message, resolve_settings

__all__ = ["add_checkpoint_argument", "add_search_arguments", "add_value_model_argument", "settings_from_args",
           "config_from_args", "print_config", "flag_message", "FIELD_FLAGS"]


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


def settings_from_args(args: argparse.Namespace) -> LocalSettings:
    """The settings the flags give (unset flags None; a command without ``--mode`` infers).

    Raises ``jupiter.task.TaskError`` naming the flag of a value out of range."""
    try:
        return search_settings.settings_from_args(args)
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
