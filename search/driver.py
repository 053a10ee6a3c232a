"""The batched driver: many trees advance together, one policy call per step.

Each step every active tree selects its expansions (PUCT trees: up to ``leaves_per_step`` leaves; REACT/VOTE:
every live path end); the executor (``search.executor``) samples all of them in ONE policy call (one per
distinct ``n``, which only differs on VOTE's first step), runs the children's cells concurrently and scores the
new nodes in one batched value call; the pure phases of ``search.step`` build, settle, evaluate and back up the
nodes. A tree that is done is decided and yielded at once, so callers (Ray workers, the CLI) can write it while
the others go on. ``run_search`` is this driver with one tree.

Long-running callers (the CLI's Ctrl-C handling, ``jupiter serve``) watch and steer trees through two hooks:
``on_update`` gets each tree's new nodes after every step, and ``stop(task_id)`` ends a tree at the next step
boundary with ``SearchResult.interrupted`` set. A ``KeyboardInterrupt`` inside a step drops that step's
unfinished nodes and ends every active tree the same way, so what was searched is never lost.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from jupiter.task import Task
from search import step
from search.checkpoints import SavedSearch
from search.config import SearchConfig
from search.executor import Executor, Request, TreeRun, call_policy, recorded_cells, tie_break_key
from search.protocols import PolicyLike, SandboxLike, Value
from search.result import SearchResult, SearchStats, result_from_tree, tree_stats
from search.tree import Node, Tree

__all__ = ["DriverStep", "TreeUpdate", "solve_many", "run_search", "tie_break_key", "call_policy",
           "recorded_cells"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DriverStep:
    """Progress after one driver step (passed to ``on_step``)."""

    step: int
    requests: int  # expansions served by this step
    model_calls: int  # policy calls this step made (1 unless VOTE's first step mixes n)
    active_trees: int
    iterations: int  # iterations done so far, summed over the active trees
    finished_trees: int


@dataclass(frozen=True)
class TreeUpdate:
    """One tree's progress after a step (passed to ``on_update``): the nodes this step added, values final."""

    task_id: str
    tree: Tree
    new_nodes: tuple[Node, ...]
    stats: SearchStats


class _Queue:
    """The task iterator, remembering whether it ran dry at the last ask (a service's feeder may fill again)."""

    def __init__(self, tasks: Iterable[Task | None]) -> None:
        self._tasks = iter(tasks)
        self.dry = False

    def __iter__(self) -> _Queue:
        return self

    def __next__(self) -> Task | None:
        try:
            item = next(self._tasks)
        except StopIteration:
            self.dry = True
            raise
        self.dry = item is None
        return item


def _stats(run: TreeRun, config: SearchConfig) -> SearchStats:
    return tree_stats(run.tree, config.mode, run.costs, time.perf_counter() - run.started)


def _plan(run: TreeRun, config: SearchConfig) -> list[Request]:
    """Select this tree's expansions for the next step; a tree with none left is done."""
    if run.done:
        return []
    requests = [Request(run, e.node, e.samples) for e in step.select_leaves(run.tree, config, run.rng)]
    run.done = not requests
    return requests


def _grow(requests: list[Request], executor: Executor, config: SearchConfig) -> tuple[int, dict[int, list[Node]]]:
    """The first half of a step over every tree with a request: sample the replies, expand, run the cells.
    Returns (policy calls, each tree's new nodes by ``id(run)``). Interrupted, it leaves nodes half-made: the
    caller drops them (``_drop_unfinished``)."""
    replies, seconds, calls = executor.sample(requests)
    children: dict[int, list[Node]] = {id(r.run): [] for r in requests}
    for request, completions, took in zip(requests, replies, seconds):
        children[id(request.run)] += step.expand(request.run.tree, request.node, completions, config, took)
    new = [child for made in children.values() for child in made]
    for child, outcome in executor.run_cells([c for c in new if step.needs_state(c)]):
        step.settle_cell(child, outcome, config)
    return calls, children


def _score(requests: list[Request], children: dict[int, list[Node]], executor: Executor,
           config: SearchConfig) -> None:
    """The second half: evaluate the new nodes (one batched value call for all trees), back up, and hand back
    the states that will not be branched again: expanded nodes' and terminal ones'."""
    runs = {id(r.run): r.run for r in requests}
    targets = {key: step.evaluate(run.tree, children[key], config, executor.value is not None,
                                  executor.count_tokens) for key, run in runs.items()}
    estimates = iter(executor.estimate([(runs[key], node) for key, t in targets.items() for node in t.ask]))
    for t in targets.values():
        step.back_up(t, [next(estimates) for _ in t.ask], config)
    executor.release([r.node for r in requests if r.node.parent is not None]
                     + [c for made in children.values() for c in made if c.is_terminal])


def _finish(run: TreeRun, config: SearchConfig, executor: Executor) -> SearchResult:
    """Decide, hand the tree's states and sandbox back, build the result."""
    executor.finish(run)
    return result_from_tree(run.task.id, run.tree, config, _stats(run, config), value_given=executor.value is not None,
                            error=run.error, interrupted=run.interrupted)


def _notify(on_update: Callable[[TreeUpdate], None] | None, run: TreeRun, nodes: list[Node],
            config: SearchConfig) -> None:
    """Tell the caller about a tree's new nodes (its counters current, wall time included); a failing callback
    is logged, never fatal to the search."""
    if on_update is None or not nodes:
        return
    try:
        on_update(TreeUpdate(run.task.id, run.tree, tuple(nodes), _stats(run, config)))
    except Exception:
        log.exception("task %s: the on_update callback failed", run.task.id)


def _drop_unfinished(run: TreeRun, executor: Executor) -> None:
    """After an interrupt inside a step: remove that step's nodes and hand back their states (the parents they
    leave unexpanded again, so a continued tree spends that iteration again)."""
    executor.release(run.tree.drop_since(run.step_mark), here=True)


def solve_many(
    tasks: Iterable[Task],
    policy: PolicyLike,
    sandbox_factory: Callable[[], SandboxLike],
    config: SearchConfig,
    value: Value | None = None,
    *,
    seed: int = 0,
    on_step: Callable[[DriverStep], None] | None = None,
    close_sandboxes: bool = True,
    on_update: Callable[[TreeUpdate], None] | None = None,
    stop: Callable[[str], bool] | None = None,
    resume: Callable[[Task], SavedSearch | None] | None = None,
) -> Iterator[SearchResult]:
    """Search every task, ``config.max_trees_in_flight`` trees at a time (fewer when the sandboxes' memory
    budget holds fewer: ``config.fit_trees_to_memory``); yield each result as it finishes.

    ``sandbox_factory()`` is called when a tree opens (on a pool thread) and, with ``close_sandboxes``, the
    sandbox is the driver's: when its tree finishes it is reset (``ReusableSandbox``) and serves the next tree,
    or closed; every one is closed when the queue runs dry or the iteration ends. Without ``close_sandboxes``
    each finished tree's states are released and the caller keeps the sandbox. Per step: one policy call for
    all pending expansions of all active trees, cells on at most ``config.max_concurrent_cells`` threads, one
    value call. Results come in finishing order. Randomness: each tree's tie-breaking RNG and the per-call
    sampling seeds derive from ``seed`` (no global random state). Stopping the iterator early closes the open
    sandboxes. An exception from the policy (as a ``PolicyError``, the backend's own exception chained) or the
    value model propagates (the trees in flight are lost; their sandboxes are closed); a sandbox that fails to
    open ends only its own tree, with ``SearchResult.error`` set.

    ``on_update(TreeUpdate)`` is called on this thread once per tree per step with the nodes that step added
    (and once with the root when a tree opens). ``stop(task_id)`` is asked for every tree before every step and
    before a queued tree opens: True ends that tree at once, decided over what it has, ``interrupted`` set. A
    ``KeyboardInterrupt`` during a step drops that step's unfinished nodes, ends every active tree that way,
    yields them, and ends the iteration (it is not re-raised: the caller sees ``interrupted`` results).

    ``resume(task)`` is asked as each task is admitted: a ``SavedSearch`` (``search.checkpoints``) makes the
    tree continue from it, its leaves' states rebuilt by replay when they are expanded; its first
    ``on_update`` names all its nodes.
    """
    queue = _Queue(tasks)
    executor = Executor(policy, config, value, seed, sandbox_factory, own_sandboxes=close_sandboxes)
    active: list[TreeRun] = []
    steps = finished = 0
    try:
        while True:
            admitted = executor.admit(active, queue, seed, stop, resume)
            if queue.dry:
                executor.queue_dry()
            for run in admitted:
                opened = run.tree.nodes if run.resumed else [run.tree.root]
                _notify(on_update, run, opened if run.sandbox is not None else [], config)
            active.extend(admitted)
            if not active:
                return
            for run in active:
                if not run.done and stop is not None and stop(run.task.id):
                    run.done = run.interrupted = True
            requests = [r for run in active for r in _plan(run, config)]
            for run in [r for r in active if r.done]:
                active.remove(run)
                finished += 1
                yield _finish(run, config, executor)
            if not requests:
                continue
            stepping = {id(r.run): r.run for r in requests}.values()
            for run in stepping:
                run.step_mark = len(run.tree.nodes)
            scoring = False
            try:
                calls, children = _grow(requests, executor, config)
                scoring = True
                _score(requests, children, executor, config)
            except KeyboardInterrupt:
                log.warning("interrupted: ending %d tree(s) with what they have", len(active))
                for run in list(active):
                    if not scoring:
                        _drop_unfinished(run, executor)
                    run.done = run.interrupted = True
                    active.remove(run)
                    finished += 1
                    yield _finish(run, config, executor)
                return
            for run in stepping:
                _notify(on_update, run, run.tree.nodes[run.step_mark:], config)
            steps += 1
            if on_step is not None:
                on_step(DriverStep(steps, len(requests), calls, len(active),
                                   sum(step.iterations_done(r.tree, config.mode) for r in active), finished))
    finally:
        executor.close(active)


def run_search(
    task: Task,
    policy: PolicyLike,
    sandbox: SandboxLike,
    config: SearchConfig,
    value: Value | None = None,
    seed: int = 0,
    on_step: Callable[[DriverStep], None] | None = None,
    on_update: Callable[[TreeUpdate], None] | None = None,
    stop: Callable[[str], bool] | None = None,
    saved: SavedSearch | None = None,
) -> SearchResult:
    """Search one task in ``sandbox`` (which the caller owns and closes): the driver with one tree.

    With ``stop`` or a Ctrl-C the result comes back early with ``interrupted`` set (see ``solve_many``);
    ``saved`` continues a half-searched tree (``search.checkpoints``).
    """
    results = list(solve_many([task], policy, lambda: sandbox, config, value, seed=seed, on_step=on_step,
                              close_sandboxes=False, on_update=on_update, stop=stop,
                              resume=None if saved is None else lambda _task: saved))
    return results[0]
