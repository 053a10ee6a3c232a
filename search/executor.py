"""The executor: what a search step needs done outside the tree, batched over every tree in flight.

It turns a step's expansions into batched policy calls (one per distinct n, repeats of a failed cell sampled
again), branches parent states and runs the children's cells on a bounded thread pool, asks the value model in
one batch, and counts what each of these cost the trees (``Costs``: the one place they are counted). It owns
the processes: the sandbox pool (a finished tree's sandbox is reset for the next one), the node -> state map (a
node never holds a process), and the admission of trees under the sandboxes' memory budget. The search logic
it serves is ``search.step``; the loop that drives both is ``search.driver``.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import cast

from jupiter.llm.types import PolicyError, SamplingParams
from jupiter.prompts import Message
from jupiter.task import Task
from search.checkpoints import SavedSearch
from search.config import Mode, SearchConfig
from search.expand import REPEAT_TEMPERATURE, make_sampling_params, repeats_failed_cell
from search.protocols import (
    BudgetedSandbox,
    Closable,
    CompletionLike,
    MemoryBudgetLike,
    Named,
    PolicyLike,
    PrefetchingState,
    RestorableState,
    ReusableSandbox,
    SandboxLike,
    StateLike,
    TokenCounter,
    Value,
)
from search.result import Costs
from search.step import CellOutcome
from search.tree import Node, NodeStatus, Tree

__all__ = ["TreeRun", "Request", "Executor", "call_policy", "tie_break_key", "recorded_cells"]

log = logging.getLogger(__name__)

Replies = list[list[CompletionLike]]


def tie_break_key(seed: int, task: Task) -> str:
    """The key of a tree's tie-breaking RNG: the seed and the task's own id, not the tree's position, so reruns
    that skip finished tasks break ties the same way. A task renamed for bookkeeping keeps its own id in
    ``metadata["task_id"]`` (the service names each job's task after the job): one task with one seed then
    grows the same tree in a batch run and in every job of the service."""
    return f"{seed}:{task.metadata.get('task_id', task.id)}"


class TreeRun:
    """The bookkeeping of one tree in flight (lives only inside ``solve_many``): its task, tree, tie-breaking
    RNG, costs so far, sandbox, and how it ended. ``saved``: a half-searched tree to continue
    (``search.checkpoints``); its costs go on from its stats'."""

    def __init__(self, task: Task, seed: int, saved: SavedSearch | None = None) -> None:
        self.task = task
        self.tree = Tree(task) if saved is None else saved.tree
        self.rng = random.Random(tie_break_key(seed, task))
        self.costs = Costs() if saved is None else replace(Costs.of(saved.stats), resumes=saved.stats.resumes + 1)
        self.started = time.perf_counter() - (0.0 if saved is None else saved.stats.wall_seconds)
        self.resumed = saved is not None
        self.sandbox: SandboxLike | None = None
        self.opened = False  # the sandbox was asked for (it may have failed: then ``error`` says why)
        self.done = False
        self.interrupted = False
        self.error: str | None = None
        self.step_mark = 1  # creation index of the first node of the step in progress


@dataclass(frozen=True)
class Request:
    """One expansion of one tree: ``node`` is to get ``n`` sampled replies."""

    run: TreeRun
    node: Node
    n: int


def call_policy(policy: PolicyLike, histories: list[list[Message]], params: SamplingParams) -> Replies:
    """``policy.generate``, whose crash reaches the caller as a ``PolicyError`` naming the backend (one that is a
    ``PolicyError`` already is raised as is), so callers can tell a dead policy from a bug in the search; the
    backend's own exception stays chained as the cause."""
    try:
        return [list(replies) for replies in policy.generate(histories, params)]
    except PolicyError:
        raise
    except Exception as exc:
        name = (policy.name if isinstance(policy, Named) else None) or type(policy).__name__
        raise PolicyError(f"{name} policy failed: {type(exc).__name__}: {exc}") from exc


def _charge(requests: Sequence[Request], replies: Replies, resampled: bool = False) -> None:
    """Count one policy call on the trees it served: the call once per tree, a request and its generated tokens
    per history sent, and each history's prompt once (its K samples continue one prompt, as the backends' own
    usage counters count it; a history sent again for several repeats in one call also counts once)."""
    for run in {id(r.run): r.run for r in requests}.values():
        run.costs.model_calls += 1
    prompted: set[int] = set()
    for request, completions in zip(requests, replies):
        costs = request.run.costs
        costs.requests += 1
        costs.repeats_resampled += resampled
        costs.completion_tokens += sum(int(c.num_tokens or 0) for c in completions)
        prompt = next((c.prompt_tokens for c in completions if c.prompt_tokens is not None), None)
        if prompt is not None and id(request) not in prompted:
            prompted.add(id(request))
            costs.prompt_tokens = (costs.prompt_tokens or 0) + int(prompt)


def _close(thing: object) -> None:
    # issubclass on the type first: the ABC cache makes it ~30x cheaper than isinstance on a protocol (~5 us,
    # once per state); isinstance still finds a wrapper's close forwarded by __getattr__ (Python < 3.12)
    if issubclass(type(thing), Closable) or isinstance(thing, Closable):
        cast(Closable, thing).close()


def _release(state: StateLike) -> None:
    """Give a state's snapshot back to the sandbox early (it will not be branched again)."""
    try:
        _close(state)
    except Exception:  # a dead runtime may fail to close; the sandbox reaps it
        log.debug("releasing a state failed", exc_info=True)


class _SandboxPool:
    """The sandboxes ``solve_many`` owns: made by the caller's factory, and, when a tree finishes, reset and
    handed to the next tree instead of closed (a ``ReusableSandbox``; others are closed as before).

    Why: a sandbox's start (its zygote importing numpy, pandas and scipy.stats) costs about 1.7 s of CPU, once
    per tree; at 150 nodes a tree that was a quarter of the sandbox's CPU per node. At most as many sandboxes
    exist as trees were in flight; the idle ones are closed as soon as the task queue runs dry.
    """

    def __init__(self, factory: Callable[[], SandboxLike]) -> None:
        self._factory = factory
        self._idle: list[SandboxLike] = []
        self._lock = threading.Lock()

    def take(self) -> SandboxLike:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._factory()

    def give(self, sandbox: SandboxLike, task_id: str) -> None:
        """A finished tree's sandbox: reset it for the next tree, or close it."""
        if isinstance(sandbox, ReusableSandbox):
            try:
                if sandbox.reset():
                    with self._lock:
                        self._idle.append(sandbox)
                    return
            except Exception:  # a sandbox that cannot be reset is closed; the finished tree is kept
                log.exception("task %s: resetting the sandbox for the next tree failed", task_id)
        try:
            _close(sandbox)
        except Exception:  # closing must not lose a finished tree
            log.exception("task %s: closing the sandbox failed", task_id)

    def close_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sandbox in idle:
            try:
                _close(sandbox)
            except Exception:
                log.exception("closing an idle sandbox failed")


def recorded_cells(node: Node) -> list[str]:
    """The cells a sandbox recorded on the way to ``node``'s state: those that ran to the end, with or without
    an error (a cell stopped by a limit ends its branch, and a reply without code runs nothing)."""
    return [n.code for n in node.path()[1:]
            if n.code is not None and n.status in (NodeStatus.CODE_OK, NodeStatus.CODE_ERROR)]


def states_per_tree(config: SearchConfig) -> int:
    """Live states a tree holds at its peak: the root and every leaf not yet expanded (tree modes: each iteration
    turns one leaf into K children; the executor hands back expanded and terminal states), or one per path."""
    if config.mode.is_tree:
        return 2 + config.iterations * (config.expansions - 1)
    return 1 + (config.vote_runs if config.mode is Mode.VOTE else 1)


def _budget(runs: Iterable[TreeRun]) -> tuple[bool, MemoryBudgetLike | None]:
    """(whether an open sandbox was found to ask, its memory budget: None when it has none)."""
    sandbox = next((run.sandbox for run in runs if run.sandbox is not None), None)
    if sandbox is None:
        return False, None
    return True, sandbox.memory_budget if isinstance(sandbox, BudgetedSandbox) else None


class Executor:
    """The I/O of the search for every tree in flight (see the module's docstring). Built and closed by
    ``solve_many``; ``own_sandboxes``: the sandboxes ``factory`` makes are the executor's (pooled, reset, closed),
    else the caller's, which get their states handed back as each tree finishes."""

    def __init__(self, policy: PolicyLike, config: SearchConfig, value: Value | None, seed: int,
                 factory: Callable[[], SandboxLike], own_sandboxes: bool) -> None:
        self.policy, self.config, self.value = policy, config, value
        self.count_tokens = policy.count_tokens if isinstance(policy, TokenCounter) else None
        self._call_rng = random.Random(f"{seed}:calls")
        self._cells = ThreadPoolExecutor(max_workers=config.max_concurrent_cells, thread_name_prefix="search-cell")
        self._pool = _SandboxPool(factory) if own_sandboxes else None
        self._factory = self._pool.take if self._pool is not None else factory
        self._states: dict[Node, StateLike] = {}  # the live nodes' notebook states (a node holds no process)
        self._fit_said = False

    # ------------------------------------------------------------------ trees: admission, opening, finishing

    def trees_in_flight(self, runs: list[TreeRun]) -> int | None:
        """How many trees may be in flight now: ``max_trees_in_flight``, or fewer when the memory budget of the
        trees' sandboxes holds fewer at their peak (``config.fit_trees_to_memory``). None while that is unknown:
        no tree's sandbox is open yet to ask (a sandbox without a budget: ``max_trees_in_flight``)."""
        config = self.config
        if not config.fit_trees_to_memory:
            return config.max_trees_in_flight
        found, budget = _budget(runs)
        if not found:
            return None
        fit = None if budget is None else budget.sandboxes_that_fit(states_per_tree(config))
        return config.max_trees_in_flight if fit is None else min(config.max_trees_in_flight, fit)

    def _held_back(self, runs: list[TreeRun], limit: int) -> None:
        """Says once per search, in the log, that the memory budget holds fewer trees than were asked for, how
        many and how to allow more: otherwise ``--concurrency 20`` that runs 6 trees at a time looks like a slow
        model."""
        if self._fit_said:
            return
        self._fit_said = True
        size = _budget(runs)[1]
        limit_bytes = size.limit_bytes if size is not None else None
        log.warning("the sandboxes' memory budget%s holds %d tree(s) at their peak of %d live states each: %d run "
                    "at once, not %d (more memory for the sandboxes: $JUPITER_SANDBOX_MEMORY_MB, docs/sandbox.md)",
                    f" ({limit_bytes // 2**20} MiB)" if isinstance(limit_bytes, int) else "", limit,
                    states_per_tree(self.config), limit, self.config.max_trees_in_flight)

    def admit(self, active: list[TreeRun], queue: Iterator[Task | None], seed: int,
              stop: Callable[[str], bool] | None, resume: Callable[[Task], SavedSearch | None] | None,
              ) -> list[TreeRun]:
        """The queued trees that may start now, opened (a tree ``stop`` ends at once is not opened). While no
        sandbox is open to say how many trees its memory budget holds, the first is opened alone to ask it."""
        admitted: list[TreeRun] = []
        while len(active) + len(admitted) < self.config.max_trees_in_flight:
            limit = self.trees_in_flight(active + admitted)
            if limit is not None and len(active) + len(admitted) >= limit:
                self._held_back(active + admitted, limit)
                break
            task = next(queue, None)
            if task is None:
                break
            run = TreeRun(task, seed, resume(task) if resume is not None else None)
            if stop is not None and stop(run.task.id):
                run.done = run.interrupted = True
            admitted.append(run)
            if limit is None and not run.done:
                self._cells.submit(self._open, run).result()
        list(self._cells.map(self._open, [r for r in admitted if not r.done and not r.opened]))
        return admitted

    def _open(self, run: TreeRun) -> None:
        """Open the tree's sandbox and root state (on a pool thread); failures end the tree with ``error``."""
        run.opened = True
        config = self.config
        if config.mode is Mode.COLLECT and run.task.label is None:
            run.error = f"task {run.task.id}: collect mode needs a label to score answers"
            run.done = True
            return
        try:
            run.sandbox = self._factory()
            root = self._states[run.tree.root] = run.sandbox.open_root(input_files=list(run.task.files))
            setup = root.run(run.task.setup, timeout=config.cell_timeout) if run.task.setup.strip() else None
        except Exception as exc:  # infrastructure boundary: the tree ends, the others go on
            log.exception("task %s: could not open the sandbox root", run.task.id)
            run.error = f"sandbox root failed: {type(exc).__name__}: {exc}"
            run.done = True
            return
        if setup is not None:
            # Run once: the root snapshot holds its result and every branch forks from it. The model reads the
            # setup's output in the task turn, so the task carries it from here on (also into the tree file).
            if not setup.ok:
                run.error = (f"task {run.task.id}: the setup cell failed ({setup.status.value}): "
                             f"{setup.observation(1000)}")
                run.done = True
                return
            run.task = run.task.replace(setup_output=setup.observation())
            run.tree.task = run.task
            run.tree.root.execution, run.tree.root.outputs = setup, list(setup.outputs)  # for the notebook
        if run.resumed:
            self._restore_states(run.tree, root)

    def _restore_states(self, tree: Tree, root: StateLike) -> None:
        """Give every leaf a resumed tree may still expand a state: recorded, rebuilt by replay on first use
        (``State.restore``); a sandbox without ``restore`` replays the cells now, in a branch of the root."""
        for node in tree.nodes[1:]:
            if not node.expandable:
                continue
            cells = recorded_cells(node)
            if isinstance(root, RestorableState):
                self._states[node] = root.restore(cells)
                continue
            state = self._states[node] = root.branch()
            for code in cells:
                state.run(code)

    def release(self, nodes: Iterable[Node], *, here: bool = False) -> None:
        """Hand the states of ``nodes`` back to their sandbox (expanded or terminal: never branched again), on the
        cell threads, or ``here`` on this one (after an interrupt, whose cells may still hold those threads)."""
        spent = [state for state in (self._states.pop(node, None) for node in nodes) if state is not None]
        if here:
            for state in spent:
                _release(state)
        else:
            list(self._cells.map(_release, spent))

    def finish(self, run: TreeRun) -> None:
        """A finished tree's states and sandbox: the sandbox goes back to the pool (reset for the next tree, or
        closed); a caller's shared sandbox outlives the tree, so its states are handed back one by one."""
        states = [self._states.pop(node) for node in run.tree.nodes if node in self._states]
        if self._pool is None:
            for state in states:
                _release(state)
        elif run.sandbox is not None:
            self._pool.give(run.sandbox, run.task.id)

    def queue_dry(self) -> None:
        """No task is waiting: the idle pooled sandboxes (and their zygotes) need not stay open."""
        if self._pool is not None:
            self._pool.close_idle()

    def close(self, active: Iterable[TreeRun]) -> None:
        """End the search's processes: the cell threads, and the sandboxes the executor owns."""
        self._cells.shutdown(wait=True)
        if self._pool is not None:
            for run in active:
                if run.sandbox is not None:
                    _close(run.sandbox)
            self._pool.close_idle()

    # ------------------------------------------------------------------ one step's I/O

    def sample(self, requests: list[Request]) -> tuple[Replies, list[float], int]:
        """The replies of every request, in order: one batched policy call per distinct ``n``, then the repeats
        of a failed cell sampled again. Returns (replies, seconds of each request's calls, policy calls)."""
        groups: dict[int, list[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(request.n, []).append(i)
        replies: Replies = [[] for _ in requests]
        seconds = [0.0] * len(requests)
        for n, indices in groups.items():
            group = [requests[i] for i in indices]
            if self.config.branch_ahead:
                self._branch_ahead(group)
            histories = [r.run.tree.messages(r.node) for r in group]
            params = make_sampling_params(self.config, n=n, seed=self._call_rng.randrange(2**31))
            started = time.perf_counter()
            outputs = call_policy(self.policy, histories, params)
            if len(outputs) != len(group):
                raise RuntimeError(f"policy returned {len(outputs)} completion lists for {len(group)} histories")
            _charge(group, outputs)
            self._resample_repeats(group, histories, outputs)
            took = time.perf_counter() - started
            for i, completions in zip(indices, outputs):
                replies[i], seconds[i] = completions, took
                requests[i].run.costs.model_seconds += took / len(group)
        return replies, seconds, len(groups)

    def _branch_ahead(self, group: list[Request]) -> None:
        """Ask each request's node state to fork its ``n`` children's states while the policy writes their cells
        (``SearchConfig.branch_ahead``). Best effort: a state that cannot prefetch is branched when its
        children need it, as without the option."""
        for request in group:
            state = self._states.get(request.node)
            if isinstance(state, PrefetchingState):
                try:
                    state.prefetch(request.n)
                except Exception:  # infrastructure boundary: run_cells branches (and reports) as usual
                    log.debug("node %s: branching ahead failed", request.node.tag, exc_info=True)

    def _resample_repeats(self, group: list[Request], histories: list[list[Message]], outputs: Replies) -> None:
        """Replace in ``outputs`` every reply that repeats its parent's failed cell by a new sample (one batched
        call per round, ``config.repeat_retries`` rounds at most, while any is left), at
        ``REPEAT_TEMPERATURE``; the last sample stands. A replaced reply's tokens stay counted: they were
        generated."""
        config = self.config
        temperature = max(config.temperature, REPEAT_TEMPERATURE)
        for _ in range(config.repeat_retries):
            spots = [(i, j) for i, request in enumerate(group) for j, completion in enumerate(outputs[i])
                     if repeats_failed_cell(request.node, completion.text)]
            if not spots:
                break
            params = make_sampling_params(config, n=1, seed=self._call_rng.randrange(2**31), temperature=temperature)
            again = call_policy(self.policy, [histories[i] for i, _ in spots], params)
            _charge([group[i] for i, _ in spots], again, resampled=True)
            for (i, j), completions in zip(spots, again):
                outputs[i][j] = completions[0]

    def run_cells(self, children: list[Node]) -> list[tuple[Node, CellOutcome]]:
        """Make each child's state, a branch of its parent's, and run its cell there (a child without code only
        branches), concurrently across children. A state is used by one thread at a time: siblings branch their
        common parent one after another (a lock per parent), then their cells run in parallel on their own
        states. A failure to branch or run is the outcome's ``failure``, never raised: a cell error is data."""
        locks = {id(child.parent): threading.Lock() for child in children}
        timeout = self.config.cell_timeout

        def run_one(child: Node) -> tuple[Node, CellOutcome]:
            parent = child.parent
            try:
                with locks[id(parent)]:
                    state = self._states.get(parent) if parent is not None else None
                    if state is None:
                        raise RuntimeError(f"node {parent.tag if parent else '?'} has no live notebook state")
                    state = self._states[child] = state.branch()
            except Exception as exc:  # infrastructure boundary
                return child, CellOutcome(failure="branch-failed", error=f"{type(exc).__name__}: {exc}")
            if child.code is None:  # an expandable malformed reply: its children resample from the parent's state
                return child, CellOutcome()
            started = time.perf_counter()
            try:
                execution = state.run(child.code, timeout=timeout)
            except Exception as exc:  # infrastructure boundary: a cell error is data, this is not
                return child, CellOutcome(failure="sandbox-failed", error=f"{type(exc).__name__}: {exc}",
                                          seconds=time.perf_counter() - started)
            return child, CellOutcome(execution=execution, seconds=time.perf_counter() - started)

        outcomes = list(self._cells.map(run_one, children))
        for child, outcome in outcomes:
            if outcome.failure is not None:
                log.warning("node %s: %s: %s", child.tag, outcome.failure, outcome.error)
        return outcomes

    def estimate(self, asks: list[tuple[TreeRun, Node]]) -> list[float | None]:
        """The value model's estimates of ``asks``' nodes, in one batched call, each clipped to [-1, 1]; None
        where it gave NaN or infinity, which says nothing (max/min would turn NaN into +1 in Q)."""
        if not asks:
            return []
        if self.value is None:
            raise RuntimeError("no value model to ask")
        started = time.perf_counter()
        raw = list(self.value.evaluate([run.tree.messages(node) for run, node in asks]))
        share = (time.perf_counter() - started) / len(asks)
        if len(raw) != len(asks):
            raise RuntimeError(f"value model returned {len(raw)} values for {len(asks)} histories")
        for run in {id(r): r for r, _ in asks}.values():
            run.costs.value_calls += 1
        estimates: list[float | None] = []
        for (run, node), estimate in zip(asks, raw):
            run.costs.value_seconds += share
            node.timings["value_s"] = round(share, 6)  # this node's share of the call
            number = _finite(estimate)
            if number is None:
                run.costs.invalid_values += 1
                log.warning("node %s: the value model returned %r; treated as no estimate", node.tag, estimate)
            estimates.append(None if number is None else max(-1.0, min(1.0, number)))
        return estimates


def _finite(estimate: float) -> float | None:
    try:
        number = float(estimate)  # a model may return None, a string or a numpy scalar all the same
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None
