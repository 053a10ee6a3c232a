"""The ``jupiter`` command: wires the sub-commands of every package together.

Each sub-command lives in ``jupiter/commands/<name>.py`` with ``add_parser(subparsers)``; its handler
returns the exit code. Modules are imported lazily per command so that ``jupiter score`` does not pay for
importing torch. Bad input exits with code 2 and one line on stderr naming the problem.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from jupiter import __version__, console_log
from jupiter.task import TaskError

__all__ = ["main", "build_parser"]

#: sub-command name → module that defines ``add_parser(subparsers)``
COMMANDS: dict[str, str] = {
    "solve": "jupiter.commands.solve",
    "score": "jupiter.commands.score",
    "value": "jupiter.commands.value",
    "nbqa": "jupiter.commands.nbqa",
    "bench": "jupiter.commands.bench",
    "serve": "jupiter.commands.serve",
    "mcp": "jupiter.commands.mcp",
    "sft": "jupiter.commands.sft",
    "doctor": "jupiter.commands.doctor",
}

def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jupiter",
        description="Tree search over Jupyter-notebook states for multi-step data analysis.",
    )
    parser.add_argument("--version", action="version", version=f"jupiter {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="log debug messages, and show other programs' output on the console")
    # a command sets its own; quiet_console: the console shows only the project's own lines unless -v is given,
    # other programs' output goes to ``jupiter.log`` in the run folder ``args.out`` (``jupiter.console_log``)
    parser.set_defaults(handler=None, interrupted_note=None, quiet_console=False)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        if only is not None and name != only:
            subparsers.add_parser(name, help=f"(see jupiter {name} --help)")
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("jupiter.commands"):
                continue  # that command is not part of this build
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=command if command in COMMANDS else None)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    if args.handler is None:
        parser.print_help()
        return 2
    try:
        if not args.quiet_console or args.verbose:
            return _run(args)
        with console_log.capture(args.out) as captured:
            captured.exit_code = _run(args)
        return captured.exit_code
    except KeyboardInterrupt:
        # only commands whose outputs are resumable say so (set_defaults(interrupted_note=...)); a plain
        # `jupiter solve` saves its partial tree itself and never gets here once the search has started
        note = args.interrupted_note
        print(f"jupiter: interrupted; {note}" if note else "jupiter: interrupted", file=sys.stderr)
        return console_log.EXIT_INTERRUPTED


def _run(args: argparse.Namespace) -> int:
    """The command's exit code; bad input is one line and code 2 (inside the console capture: an explained
    failure, not a crash)."""
    try:
        return int(args.handler(args) or 0)
    except TaskError as exc:
        print(f"jupiter: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
