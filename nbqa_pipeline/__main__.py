"""``python -m nbqa_pipeline STAGE ...``: the same commands as ``jupiter nbqa STAGE ...``."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Sequence

from jupiter.commands.nbqa import add_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nbqa_pipeline")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    subparsers = parser.add_subparsers(dest="command")
    add_parser(subparsers)
    argv = list(sys.argv[1:] if argv is None else argv)
    verbose = [a for a in argv if a in ("-v", "--verbose")]
    args = parser.parse_args([*verbose, "nbqa", *[a for a in argv if a not in verbose]])
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    return int(args.handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
