"""The ``--help`` layout of every sub-command: the description as written, and each option's default.

Why: a newcomer reading ``jupiter bench dabench --help`` must see what an unset option does. Defaults that
say nothing (None: "decided elsewhere", which the help text then explains; False for on/off switches) and
help texts that already name their default are left alone.
"""

from __future__ import annotations

import argparse

__all__ = ["HelpFormatter"]


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's line breaks and appends ``(default: X)`` where X tells the reader something."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return text
        if "default" in text.lower() or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            return text
        return super()._get_help_string(action) or ""
