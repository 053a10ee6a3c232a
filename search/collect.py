"""Trajectory collection on Ray: search every task with the paper's collection settings, one tree file each.

    python search/collect.py --tasks nbqa.jsonl --out runs/collect --llm http://127.0.0.1:8000/v1#model=m
    ray job submit --working-dir . -- python search/collect.py --tasks nbqa.jsonl --out /shared/collect --llm ...

The entry point that ``ray job submit`` runs; everything it does is ``jupiter.commands.collect`` (``--help`` lists the
flags, ``--print-config`` the settings, ``--dry-run`` the cost).
"""

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script (``python search/collect.py``): import the repo's packages
    _REPO = str(Path(__file__).resolve().parents[1])
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        sys.path.pop(0)  # search/ itself must not shadow top-level names
    if _REPO not in sys.path:
        sys.path.insert(0, _REPO)

from jupiter.commands.collect import main

if __name__ == "__main__":
    sys.exit(main())
