"""Half-searched trees on disk, so that a killed run continues its trees instead of starting them over.

A run that keeps many trees in flight loses every one of them when its process dies: at the paper's 40
iterations on a CPU a tree takes hours, and a session that ends (SIGKILL, a lost machine) throws all of that
away. ``TreeCheckpoints`` writes each tree in flight to ``<folder>/<id>.json`` as the search goes (from the
driver's ``on_update`` hook, at most every ``every_s`` seconds per tree, atomically), and ``load`` gives a
rerun the tree and its counters back (``SavedSearch``), which ``solve_many(resume=...)`` continues: its states
are rebuilt lazily by replaying each path's cells (``sandbox.State.restore``), only for the leaves the search
expands again.

A resumed tree is the saved tree plus new nodes, not the tree an uninterrupted run would have grown: the
tie-breaking and sampling random streams start again, and a replayed cell may print something else than it did
(a random draw without a seed). The stored observations are what the model reads, so its prompts are the same;
``SearchStats.resumes`` counts how often a tree was continued.

A tree continues only under the search settings that grew it (``settings``, a ``SearchConfig.to_dict()``):
with other settings (another mode, another c_puct) the task starts over, and the log says which setting
changed. The iteration budget and the execution knobs may change (``RESUMABLE_CHANGES``): a tree saved at 20
iterations can be continued to 40.

File layout: ``{"format": "jupiter-checkpoint", "version": 1, "task_id", "saved_at", "settings": {...},
"stats": {...}, "tree": <search.tree_io.tree_to_dict>}``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from jupiter.appendlog import replace_atomically
from jupiter.task import Task
from search.result import SearchStats
from search.tree import Tree
from search.tree_io import TreeFileError, tree_from_dict, tree_to_dict

__all__ = ["SavedSearch", "TreeCheckpoints", "CHECKPOINTS", "CHECKPOINT_FORMAT", "DEFAULT_EVERY_S", "RESUMABLE_CHANGES"]

log = logging.getLogger(__name__)

CHECKPOINT_FORMAT = "jupiter-checkpoint"
#: a run folder's sub-folder of half-searched trees (``jupiter bench``, ``jupiter solve``)
CHECKPOINTS = "checkpoints"
_VERSION = 1

#: Seconds between two saves of one tree: a killed run loses at most this much of each tree's search. A save
#: of a 120-node tree takes about 10 ms (benchmarks/perf/checkpoint_save.py at commit b134c4f), a CPU step
#: about a minute.
DEFAULT_EVERY_S = 30.0

#: settings that may differ between the run that saved a tree and the run that continues it
RESUMABLE_CHANGES = frozenset({"iterations", "max_trees_in_flight", "max_concurrent_cells", "fit_trees_to_memory",
                                "branch_ahead"})


@dataclass(frozen=True)
class SavedSearch:
    """A half-searched tree and its counters as the killed run last saved them."""

    tree: Tree
    stats: SearchStats
    saved_at: str


def _file_name(task_id: str) -> str:
    return (re.sub(r"[^A-Za-z0-9_.-]+", "_", task_id) or "task") + ".json"


def _stats_from_dict(data: Any) -> SearchStats:
    known = {f.name for f in fields(SearchStats)}
    return SearchStats(**{k: v for k, v in dict(data or {}).items() if k in known})


class TreeCheckpoints:
    """A folder of half-searched trees, one file per task, written while the trees grow.

    ``on_update`` is the driver hook (``solve_many(on_update=...)``); ``save`` writes one tree now (a tree the
    driver handed back as interrupted); ``load`` reads one back for ``solve_many(resume=...)``; ``discard``
    removes a tree's file once its finished result is recorded elsewhere.
    """

    def __init__(self, folder: Path, every_s: float = DEFAULT_EVERY_S, settings: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder)
        self.every_s = float(every_s)
        self.settings = None if settings is None else json.loads(json.dumps(settings, default=str))
        self._last: dict[str, float] = {}
        self._warned = False

    def path(self, task_id: str) -> Path:
        return self.folder / _file_name(task_id)

    def on_update(self, update: Any) -> None:
        """Save ``update.tree`` unless this tree was saved less than ``every_s`` seconds ago. A folder that cannot
        be written is said once (the search goes on; only its continuing is lost)."""
        last = self._last.get(update.task_id)
        if last is not None and time.monotonic() - last < self.every_s:
            return
        try:
            self.save(update.task_id, update.tree, update.stats)
        except OSError as exc:
            self._last[update.task_id] = time.monotonic()
            if not self._warned:
                self._warned = True
                log.warning("cannot write checkpoints into %s (%s): the trees in flight will not be continued "
                            "after a kill", self.folder, exc)

    def save(self, task_id: str, tree: Tree, stats: SearchStats) -> Path:
        data = {"format": CHECKPOINT_FORMAT, "version": _VERSION, "task_id": task_id,
                "saved_at": time.strftime("%Y-%m-%dT%H:%M:%S"), "settings": self.settings, "stats": stats.to_dict(),
                "tree": tree_to_dict(tree)}
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
        path = replace_atomically(self.path(task_id), lambda tmp: tmp.write_text(text, encoding="utf-8"))
        self._last[task_id] = time.monotonic()
        return path

    def load(self, task: Task) -> SavedSearch | None:
        """``task``'s saved tree (with ``task`` as its task), or None when there is none.

        A file that cannot be used (damaged, another task's, another format) is renamed ``<id>.json.bad`` with a
        warning and the task starts over: a checkpoint is a saving, never a reason for a run to fail. A tree
        grown with other settings is not continued either (warned; its file is replaced as the new tree grows).
        """
        path = self.path(task.id)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or data.get("format") != CHECKPOINT_FORMAT:
                raise TreeFileError("not a jupiter checkpoint")
            if str(data.get("task_id")) != task.id:
                raise TreeFileError(f"it holds task {data.get('task_id')!r}")
            changed = self._changed(data.get("settings"))
            if changed:
                log.warning("%s: task %s starts over: its tree was grown with other settings (%s)", path, task.id,
                            "; ".join(changed))
                return None
            tree = tree_from_dict(data["tree"], where=str(path), task=task)
            stats = _stats_from_dict(data.get("stats"))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            bad = path.with_name(path.name + ".bad")
            path.replace(bad)
            log.warning("%s: cannot resume from it (%s); task %s starts over, the file is kept as %s",
                        path, exc, task.id, bad.name)
            return None
        log.info("task %s: continuing its half-searched tree (%d nodes, %d iterations, saved %s)", task.id,
                 len(tree.nodes), stats.iterations, data.get("saved_at", "?"))
        return SavedSearch(tree=tree, stats=stats, saved_at=str(data.get("saved_at", "")))

    def _changed(self, stored: Any) -> list[str]:
        """``"key: saved -> now"`` for each setting that forbids continuing (none when either side has none)."""
        if self.settings is None or not isinstance(stored, dict):
            return []
        keys = sorted((set(stored) | set(self.settings)) - RESUMABLE_CHANGES)
        return [f"{k}: {stored.get(k)!r} -> {self.settings.get(k)!r}" for k in keys
                if stored.get(k) != self.settings.get(k)]

    def discard(self, task_id: str) -> None:
        """Remove ``task_id``'s file, and the folder once it is empty (a finished run leaves no empty folder)."""
        self.path(task_id).unlink(missing_ok=True)
        self._last.pop(task_id, None)
        try:
            self.folder.rmdir()
        except OSError:  # absent, or another tree's file is still there
            pass
