"""The run layer: many trees searched so that nothing is lost, for every entry point.

``jupiter solve``, ``jupiter.solve()``, ``jupiter bench``, ``jupiter serve`` and the Ray tree workers all run
their trees through ``search_trees``, which is the batched driver (``search.driver.solve_many``) with what a run
needs around it wired once:

- **checkpoints** (``search.checkpoints.TreeCheckpoints``, or anything with its four methods: ``Checkpoints``):
  a task with a saved tree continues it; each tree is saved as it grows; a tree that comes back stopped early
  is saved whole (a rerun continues it); a finished tree's file is removed once the caller has taken its
  result (when it asks for the next one), so a kill between the two loses nothing;
- **the driver raising** (the policy backend died, a Ctrl-C outside a step): every tree in flight comes back as
  a result over what it had after its last finished step (``interrupted``, and ``error`` naming the policy
  failure), saved like any stopped tree, and then the exception goes on to the caller. The caller writes those
  results as it writes the others; no entry point keeps its own copy of the last update.

A ``KeyboardInterrupt`` inside a step is the driver's own business: it drops that step's nodes and yields the
trees as stopped results (``solve_many``), which this layer saves like the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Protocol

from jupiter.llm.types import PolicyError
from jupiter.task import Task
from search.checkpoints import SavedSearch
from search.config import SearchConfig
from search.driver import DriverStep, TreeUpdate, solve_many
from search.protocols import PolicyLike, SandboxLike, Value
from search.result import Costs, SearchResult, SearchStats, result_from_tree, tree_stats
from search.tree import Tree

__all__ = ["Checkpoints", "search_trees"]

log = logging.getLogger(__name__)


class Checkpoints(Protocol):
    """Where a run keeps its trees in flight (``search.checkpoints.TreeCheckpoints`` is the one on disk)."""

    def on_update(self, update: TreeUpdate) -> None: ...

    def load(self, task: Task) -> SavedSearch | None: ...

    def save(self, task_id: str, tree: Tree, stats: SearchStats) -> Path | None: ...

    def discard(self, task_id: str) -> None: ...


def _partial_result(update: TreeUpdate, size: int, config: SearchConfig, *, value_given: bool, error: str | None,
                   started: float) -> SearchResult:
    """A result over the tree as it stood after its last finished step (``update``, when the tree had ``size``
    nodes), for when the driver raised instead of returning one. Marked ``interrupted``; ``started``:
    ``time.perf_counter()`` when the tree's search (re)started, less the time a continued tree had already taken.
    """
    tree = update.tree
    tree.drop_since(size)  # nodes of the step that failed: not run, not backed up (nor counted as iterations)
    stats = tree_stats(tree, config.mode, Costs.of(update.stats), time.perf_counter() - started)
    return result_from_tree(update.task_id, tree, config, stats, value_given=value_given, error=error,
                            interrupted=True)


def _save(checkpoints: Checkpoints | None, result: SearchResult) -> None:
    if checkpoints is None or result.tree is None:
        return
    try:
        checkpoints.save(result.task_id, result.tree, result.stats)
    except OSError:  # the other trees' results still go on
        log.exception("task %s: could not save its checkpoint", result.task_id)


def search_trees(
    tasks: Iterable[Task],
    policy: PolicyLike,
    sandbox_factory: Callable[[], SandboxLike],
    config: SearchConfig,
    value: Value | None = None,
    *,
    seed: int = 0,
    checkpoints: Checkpoints | None = None,
    resume: Callable[[Task], SavedSearch | None] | None = None,
    discard_finished: bool = True,
    on_update: Callable[[TreeUpdate], None] | None = None,
    on_step: Callable[[DriverStep], None] | None = None,
    stop: Callable[[str], bool] | None = None,
    close_sandboxes: bool = True,
    policy_name: str = "",
) -> Iterator[SearchResult]:
    """Search ``tasks`` with ``solve_many`` (same arguments) and yield each result as it comes, checkpointed.

    ``checkpoints``: continue, save and discard trees as the module says (None: the trees are not kept);
    ``resume`` replaces ``checkpoints.load`` as the source of saved trees (a caller that already read its one
    tree); ``discard_finished=False`` leaves a finished tree's file to the caller (a Ray worker: its driver
    removes it once the tree is written). When the driver raises, the trees in flight are yielded as partial
    results before the exception is raised again; a ``PolicyError`` is named in their ``error`` (with
    ``policy_name``, e.g. ``vllm (--llm default)``).
    """
    latest: dict[str, tuple[TreeUpdate, int, float]] = {}  # task id -> last update, tree size then, its start

    def keep(update: TreeUpdate) -> None:
        # the tree's clock, from its first update: less the time a continued tree had already taken
        started = latest[update.task_id][2] if update.task_id in latest else \
            time.perf_counter() - update.stats.wall_seconds
        latest[update.task_id] = (update, len(update.tree.nodes), started)
        if on_update is not None:  # first: the checkpoint keeps the tree as the caller shaped it (its task id)
            on_update(update)
        if checkpoints is not None:
            checkpoints.on_update(update)

    load = resume if resume is not None else (checkpoints.load if checkpoints is not None else None)
    results = solve_many(tasks, policy, sandbox_factory, config, value, seed=seed, on_step=on_step,
                         close_sandboxes=close_sandboxes, on_update=keep, stop=stop, resume=load)
    try:
        for result in results:
            latest.pop(str(result.task_id), None)
            if result.interrupted:
                _save(checkpoints, result)
            yield result
            if not result.interrupted and checkpoints is not None and discard_finished:
                checkpoints.discard(str(result.task_id))  # the caller has taken it: the file is spent
    except (PolicyError, KeyboardInterrupt) as exc:
        if isinstance(exc, PolicyError):
            error: str | None = f"the policy failed: {policy_name + ': ' if policy_name else ''}{exc}"
        else:
            error = None
        if latest:  # info: the caller says how the run ended, in one line
            log.info("%s: ending %d tree(s) with what they had after their last step", type(exc).__name__,
                     len(latest))
        for update, size, started in list(latest.values()):
            result = _partial_result(update, size, config, value_given=value is not None, error=error,
                                    started=started)
            _save(checkpoints, result)
            yield result
        raise
