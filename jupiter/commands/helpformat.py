"""The ``--help`` layout of every sub-command: the description as written, and each option's default.

Why: a newcomer reading ``jupiter bench dabench --help`` must see what an unset option does. Defaults that
say nothing (None: "decided elsewhere", which the help text then explains; False for on/off switches) and
help texts that already name their default are left alone.
"""

from __future__ import annotations

import argparse
import copy

__all__ = ["HelpFormatter"]


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's line breaks and appends ``(default: X)`` where X tells the reader something."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if not _telling(action.default):
            return text
        if "(default" in text.lower() or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            return text
        return super()._get_help_string(action) or ""

    def _format_action(self, action: argparse.Action) -> str:
        # argparse prints nothing after an option without a help text, so its default would not show either
        if not action.help and action.option_strings and _telling(action.default):
            action = copy.copy(action)
            action.help = action.dest.replace("_", " ")
        return super()._format_action(action)


def _telling(default: object) -> bool:
    """A default worth printing: not None ("decided elsewhere"), not a switch's False, not suppressed."""
    return default is not None and default is not False and default is not argparse.SUPPRESS
