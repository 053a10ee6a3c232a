"""Tree files from the command line: rewrite them lean, or export them in the paper code's layout.

    python -m search.tree_cli lean  TREE... --out DIR   # current layout; prints bytes per node before/after
    python -m search.tree_cli paper TREE... --out DIR   # full ``messages`` per node, for the paper's scripts

Each reads any layout ``search.tree_io.load_tree`` reads (ours, either version, or the paper's), writes DIR/<same
name>, refuses to overwrite its input, and prints one JSON object on stdout. Exit status 1 names an unreadable
file; 2 a bad command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from search.export import save_paper_tree
from search.stored_outputs import DEFAULT_MAX_CHARS
from search.tree_io import TreeFileError, load_tree, save_tree

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m search.tree_cli", description=__doc__.splitlines()[0])
    inner = parser.add_subparsers(dest="command", required=True)
    lean = inner.add_parser("lean", help="rewrite in the current (lean) layout; print bytes per node before/after")
    paper = inner.add_parser("paper", help="write the paper code's layout (full messages per node)")
    for sub in (lean, paper):
        sub.add_argument("trees", nargs="+", type=Path, help="tree files")
        sub.add_argument("--out", type=Path, required=True, help="folder for the written files (same names)")
    lean.add_argument("--max-output-chars", type=int, default=DEFAULT_MAX_CHARS,
                      help=f"text kept per cell's outputs (default {DEFAULT_MAX_CHARS:,})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    before = after = nodes = 0
    for path in args.trees:
        target = args.out / path.name
        if target.resolve() == path.resolve():
            print(f"search.tree_cli: {path}: --out would overwrite the input; choose another folder", file=sys.stderr)
            return 2
        try:
            tree = load_tree(path)
            if args.command == "lean":
                save_tree(tree, target, args.max_output_chars)
            else:
                save_paper_tree(tree, target)
        except (TreeFileError, ValueError) as exc:
            print(f"search.tree_cli: {exc}", file=sys.stderr)
            return 1
        before += path.stat().st_size
        after += target.stat().st_size
        nodes += len(tree)
    print(json.dumps({"written": len(args.trees), "out": str(args.out), "nodes": nodes, "bytes_before": before,
                      "bytes_after": after, "bytes_per_node_before": round(before / nodes, 1),
                      "bytes_per_node_after": round(after / nodes, 1), "after_over_before": round(after / before, 4)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
