"""The batched driver: many trees advance together, one policy call per step.

Each step every active tree plans its pending expansions (PUCT trees: one selected leaf; REACT/VOTE: every live
path end). All pending histories go to the policy in ONE ``generate`` call (one per distinct ``n``, which only
differs on VOTE's first step), the children's cells run concurrently on a bounded thread pool, the new nodes
are scored in one batched value call, and values are backed up. A tree that is done is decided and yielded at
once, so callers (Ray workers, the CLI) can write it while the others go on. ``run_search`` is this driver
with one tree.

Long-running callers (the CLI's Ctrl-C handling, ``jupiter serve``) watch and steer trees through two hooks:
``on_update`` gets each tree's new nodes after every step, and ``stop(task_id)`` ends a tree at the next step
boundary with ``SearchResult.interrupted`` set. A ``KeyboardInterrupt`` inside a step drops that step's
unfinished nodes and ends every active tree the same way, so what was searched is never lost.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from jupiter.llm.types import PolicyError
from jupiter.prompts import Message
from jupiter.task import Task
from search.checkpoints import SavedSearch
from search.config import BackupRule, Mode, SearchConfig
from search.evaluate import fixed_value, needs_value_model
from search.expand import (
    REPEAT_TEMPERATURE,
    apply_execution,
    apply_malformed,
    check_limits,
    classify_reply,
    draft_children,
    make_sampling_params,
    repeats_failed_cell,
)
from search.protocols import PolicyLike, RestorableState, ReusableSandbox, SandboxLike, Value
from search.puct import backup, select
from search.result import SearchResult, SearchStats, result_from_tree
from search.tree import MODEL_FAILURES, Node, NodeStatus, TerminalReason, Tree

__all__ = ["DriverStep", "TreeUpdate", "solve_many", "run_search", "tie_break_key", "call_policy"]

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


@dataclass(frozen=True)
class _Request:
    run: _TreeRun
    node: Node
    n: int


def tie_break_key(seed: int, task: Task) -> str:
    """The key of a tree's tie-breaking RNG: the seed and the task's own id, not the tree's position, so reruns
    that skip finished tasks break ties the same way. A task renamed for bookkeeping keeps its own id in
    ``metadata["task_id"]`` (the service names each job's task after the job): one task with one seed then
    grows the same tree in a batch run and in every job of the service."""
    return f"{seed}:{task.metadata.get('task_id', task.id)}"


class _TreeRun:
    """The driver's bookkeeping for one tree (private; lives only inside ``solve_many``).

    ``saved``: a half-searched tree to continue (``search.checkpoints``); its counters go on from theirs.
    """

    def __init__(self, task: Task, seed: int, saved: SavedSearch | None = None) -> None:
        self.task = task
        self.tree = Tree(task) if saved is None else saved.tree
        self.rng = random.Random(tie_break_key(seed, task))
        self.stats = SearchStats() if saved is None else dataclasses.replace(saved.stats,
                                                                            resumes=saved.stats.resumes + 1)
        self.started = time.perf_counter() - self.stats.wall_seconds
        self.resumed = saved is not None
        self.sandbox: Any = None
        self.opened = False  # the sandbox was asked for (it may have failed: then ``error`` says why)
        self.done = False
        self.interrupted = False
        self.error: str | None = None
        self.step_mark = 1  # creation index of the first node of the step in progress
        self.planned = 0  # iterations the step in progress counts (taken back if that step is dropped)

    def plan(self, config: SearchConfig) -> list[_Request]:
        """This tree's expansions for the next step (marks the tree done when there are none)."""
        self.planned = 0
        if self.done:
            return []
        root = self.tree.root
        if self.stats.iterations >= config.iterations:
            self.done = True
            return []
        if config.mode.is_tree:
            leaves: list[Node] = []
            wanted = min(config.leaves_per_step, config.iterations - self.stats.iterations)
            while len(leaves) < wanted:
                node = select(root, config.c_puct, self.rng, claimed=leaves)
                if node is None:
                    break
                leaves.append(node)
            requests = [_Request(self, node, config.expansions) for node in leaves]
        elif not root.expanded:
            runs = config.vote_runs if config.mode is Mode.VOTE else 1
            requests = [_Request(self, root, runs)]
        else:
            requests = [_Request(self, n, 1) for n in self.tree.nodes if n.expandable]
        if not requests:
            self.done = True
        else:
            self.planned = len(requests) if config.mode.is_tree else 1
            self.stats.iterations += self.planned
        return requests


def _release(state: Any) -> None:
    """Give a state's snapshot back to the sandbox early (it will not be branched again)."""
    close = getattr(state, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # a dead runtime may fail to close; the sandbox reaps it
            log.debug("releasing a state failed", exc_info=True)


def _close_sandbox(sandbox: Any) -> None:
    close = getattr(sandbox, "close", None)
    if callable(close):
        close()


class _SandboxPool:
    """The sandboxes ``solve_many`` owns: made by the caller's factory, and, when a tree finishes, reset and
    handed to the next tree instead of closed (a ``ReusableSandbox``; others are closed as before).

    Why: a sandbox's start (its zygote importing numpy, pandas and scipy.stats) costs about 1.7 s of CPU, once
    per tree; at 150 nodes a tree that was a quarter of the sandbox's CPU per node. At most as many sandboxes
    exist as trees were in flight; the idle ones are closed as soon as the task queue runs dry.
    """

    def __init__(self, factory: Callable[[], SandboxLike]) -> None:
        self._factory = factory
        self._idle: list[Any] = []
        self._lock = threading.Lock()

    def take(self) -> SandboxLike:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._factory()

    def give(self, sandbox: Any, task_id: str) -> None:
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
            _close_sandbox(sandbox)
        except Exception:  # closing must not lose a finished tree
            log.exception("task %s: closing the sandbox failed", task_id)

    def close_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sandbox in idle:
            try:
                _close_sandbox(sandbox)
            except Exception:
                log.exception("closing an idle sandbox failed")


class _Queue:
    """The task iterator, remembering whether it ran dry at the last ask (a service's feeder may fill again)."""

    def __init__(self, tasks: Iterable[Task]) -> None:
        self._tasks = iter(tasks)
        self.dry = False

    def __iter__(self) -> _Queue:
        return self

    def __next__(self) -> Task:
        try:
            item = next(self._tasks)
        except StopIteration:
            self.dry = True
            raise
        self.dry = item is None
        return item


def _open(run: _TreeRun, factory: Callable[[], SandboxLike], config: SearchConfig) -> None:
    """Open the tree's sandbox and root state (on a pool thread); failures end the tree with ``error``."""
    run.opened = True
    if config.mode is Mode.COLLECT and run.task.label is None:
        run.error = f"task {run.task.id}: collect mode needs a label to score answers"
        run.done = True
        return
    try:
        run.sandbox = factory()
        run.tree.root.state = run.sandbox.open_root(input_files=list(run.task.files))
        setup = None
        if run.task.setup.strip():
            setup = run.tree.root.state.run(run.task.setup, timeout=config.cell_timeout)
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
        run.tree.root.execution, run.tree.root.outputs = setup, list(setup.outputs)  # for the exported notebook
    if run.resumed:
        _restore_states(run.tree)


def recorded_cells(node: Node) -> list[str]:
    """The cells a sandbox recorded on the way to ``node``'s state: those that ran to the end, with or without
    an error (a cell stopped by a limit ends its branch, and a reply without code runs nothing)."""
    return [n.code for n in node.path()[1:]
            if n.code is not None and n.status in (NodeStatus.CODE_OK, NodeStatus.CODE_ERROR)]


def _restore_states(tree: Tree) -> None:
    """Give every leaf a resumed tree may still expand a state: recorded, rebuilt by replay on first use
    (``State.restore``); a sandbox without ``restore`` replays the cells now, in a branch of the root."""
    root_state = tree.root.state
    for node in tree.nodes[1:]:
        if not node.expandable:
            continue
        cells = recorded_cells(node)
        if isinstance(root_state, RestorableState):
            node.state = root_state.restore(cells)
            continue
        node.state = root_state.branch()
        for code in cells:
            node.state.run(code)


def _states_per_tree(config: SearchConfig) -> int:
    """Live states a tree holds at its peak: the root and every leaf not yet expanded (tree modes: each iteration
    turns one leaf into K children; the driver hands back expanded and terminal states), or one per path."""
    if config.mode.is_tree:
        return 2 + config.iterations * (config.expansions - 1)
    return 1 + (config.vote_runs if config.mode is Mode.VOTE else 1)


def _trees_in_flight(runs: list[_TreeRun], config: SearchConfig) -> int | None:
    """How many trees may be in flight now: ``max_trees_in_flight``, or fewer when the memory budget of the
    trees' sandboxes holds fewer at their peak (``config.fit_trees_to_memory``). None while that is unknown: no
    tree's sandbox is open yet to ask (a sandbox without a budget: ``max_trees_in_flight``)."""
    if not config.fit_trees_to_memory:
        return config.max_trees_in_flight
    sandbox = next((run.sandbox for run in runs if run.sandbox is not None), None)
    if sandbox is None:
        return None
    budget = getattr(sandbox, "memory_budget", None)  # a SandboxLike need not have one
    fit = None if budget is None else budget.sandboxes_that_fit(_states_per_tree(config))
    return config.max_trees_in_flight if fit is None else min(config.max_trees_in_flight, fit)


class _FitNotice:
    """Says once per search, in the log, that the memory budget holds fewer trees than were asked for, how many
    and how to allow more: otherwise ``--concurrency 20`` that runs 6 trees at a time looks like a slow model."""

    def __init__(self, config: SearchConfig) -> None:
        self.config = config
        self.said = False

    def __call__(self, runs: list[_TreeRun], limit: int) -> None:
        if self.said:
            return
        self.said = True
        sandbox = next((run.sandbox for run in runs if run.sandbox is not None), None)
        budget = getattr(sandbox, "memory_budget", None)  # a SandboxLike need not have one
        size = getattr(budget, "limit_bytes", None)
        log.warning("the sandboxes' memory budget%s holds %d tree(s) at their peak of %d live states each: %d run "
                    "at once, not %d (more memory for the sandboxes: $JUPITER_SANDBOX_MEMORY_MB, docs/sandbox.md)",
                    f" ({size // 2**20} MiB)" if isinstance(size, int) else "", limit,
                    _states_per_tree(self.config), limit, self.config.max_trees_in_flight)


def _admit(active: list[_TreeRun], queue: Iterator[Task], seed: int, config: SearchConfig,
           stop: Callable[[str], bool] | None, open_now: Callable[[_TreeRun], None],
           resume: Callable[[Task], SavedSearch | None] | None = None,
           held_back: Callable[[list[_TreeRun], int], None] | None = None) -> list[_TreeRun]:
    """The queued trees that may start now (not yet opened, except the first one when it is opened to learn how
    many trees the memory holds: ``open_now``). ``held_back(runs, limit)`` is told when the memory budget, not
    ``max_trees_in_flight``, stops the admission."""
    admitted: list[_TreeRun] = []
    while len(active) + len(admitted) < config.max_trees_in_flight:
        limit = _trees_in_flight(active + admitted, config)
        if limit is not None and len(active) + len(admitted) >= limit:
            if held_back is not None:
                held_back(active + admitted, limit)
            break
        item = next(queue, None)
        if item is None:
            break
        run = _TreeRun(item, seed, resume(item) if resume is not None else None)
        if stop is not None and stop(run.task.id):
            run.done = run.interrupted = True
        admitted.append(run)
        if limit is None and not run.done:
            open_now(run)
    return admitted


def _expand(requests: list[_Request], policy: PolicyLike, config: SearchConfig, call_rng: random.Random,
            ) -> tuple[list[tuple[_Request, Node]], int]:
    """One batched policy call per distinct n; children built (not yet run). Returns (new children, calls)."""
    groups: dict[int, list[_Request]] = {}
    for request in requests:
        groups.setdefault(request.n, []).append(request)
    children: list[tuple[_Request, Node]] = []
    for n, group in groups.items():
        histories: list[list[Message]] = [r.run.tree.messages(r.node) for r in group]
        params = make_sampling_params(config, n=n, seed=call_rng.randrange(2**31))
        started = time.perf_counter()
        outputs = call_policy(policy, histories, params)
        if len(outputs) != len(group):
            raise RuntimeError(f"policy returned {len(outputs)} completion lists for {len(group)} histories")
        for run in {id(r.run): r.run for r in group}.values():
            run.stats.model_calls += 1
        outputs = _resample_repeats(group, histories, [list(c) for c in outputs], policy, config, call_rng)
        seconds = time.perf_counter() - started
        dedupe = config.drop_duplicates and config.mode.is_tree
        for request, completions in zip(group, outputs):
            stats = request.run.stats
            stats.requests += 1
            drafts, duplicates = draft_children(completions, dedupe, config.prior_rule)
            stats.duplicates_dropped += duplicates
            for completion in completions:
                stats.completion_tokens += int(completion.num_tokens or 0)
            # the K samples of one history continue one prompt: it is processed (and counted) once, as the
            # backends' own usage counters do
            _count_prompt(stats, completions)
            request.node.expanded = True
            for draft in drafts:
                parsed = draft.parsed
                child = request.run.tree.add_child(
                    request.node, thought=parsed.thought, code=parsed.code, reply=draft.text,
                    finish_reason=draft.finish_reason, prior=draft.prior, final_answer=parsed.answer,
                    multiplicity=draft.multiplicity, timings={"model_s": round(seconds, 6)},
                )
                # the reference code keeps malformed replies expandable in inference only
                outcome = classify_reply(draft, config.malformed_terminal or config.mode is not Mode.INFER)
                if outcome is not None:
                    child.status, child.terminal = outcome
                    if child.is_malformed and not child.is_terminal:
                        apply_malformed(child, request.node, config)
                children.append((request, child))
    return children, len(groups)


def _resample_repeats(group: list[_Request], histories: list[list[Message]], outputs: list[list[Any]],
                      policy: PolicyLike, config: SearchConfig, call_rng: random.Random) -> list[list[Any]]:
    """``outputs`` with every reply that repeats its parent's failed cell sampled again (one batched call per
    round, ``config.repeat_retries`` rounds at most, while any is left), at ``REPEAT_TEMPERATURE``; the last
    sample stands. A replaced reply's tokens stay counted: they were generated; each resampled history's prompt
    counts once per round, as in ``_expand``."""
    temperature = max(config.temperature, REPEAT_TEMPERATURE)
    for _ in range(config.repeat_retries):
        spots = [(i, j) for i, request in enumerate(group) for j, completion in enumerate(outputs[i])
                 if repeats_failed_cell(request.node, completion.text)]
        if not spots:
            break
        params = make_sampling_params(config, n=1, seed=call_rng.randrange(2**31), temperature=temperature)
        again = call_policy(policy, [histories[i] for i, _ in spots], params)
        for run in {id(group[i].run): group[i].run for i, _ in spots}.values():
            run.stats.model_calls += 1
        prompted: set[int] = set()
        for (i, j), completions in zip(spots, again):
            stats = group[i].run.stats
            stats.repeats_resampled += 1
            stats.requests += 1
            stats.completion_tokens += int(outputs[i][j].num_tokens or 0)
            outputs[i][j] = completions[0]
            if i not in prompted:
                prompted.add(i)
                _count_prompt(stats, completions)
    return outputs


def _count_prompt(stats: Any, completions: list[Any]) -> None:
    """Add one history's prompt tokens (the same on every sibling it continued) to ``stats.prompt_tokens``."""
    prompt_tokens = next((c.prompt_tokens for c in completions
                          if getattr(c, "prompt_tokens", None) is not None), None)
    if prompt_tokens is not None:
        stats.prompt_tokens = (stats.prompt_tokens or 0) + int(prompt_tokens)


def call_policy(policy: PolicyLike, histories: list[list[Message]], params: Any) -> list[list[Any]]:
    """``policy.generate``, whose crash reaches the caller as a ``PolicyError`` naming the backend (one that is a
    ``PolicyError`` already is raised as is), so callers can tell a dead policy from a bug in the search; the
    backend's own exception stays chained as the cause."""
    try:
        return policy.generate(histories, params)
    except PolicyError:
        raise
    except Exception as exc:
        name = getattr(policy, "name", None) or type(policy).__name__
        raise PolicyError(f"{name} policy failed: {type(exc).__name__}: {exc}") from exc


def _run_cells(children: list[tuple[_Request, Node]], pool: ThreadPoolExecutor, config: SearchConfig) -> None:
    """Branch each code child's parent state and run its cell, concurrently across children.

    A state is used by one thread at a time: siblings branch their common parent one after another (a lock per
    parent), then their cells run in parallel on their own new states.
    """
    to_run = [child for _, child in children if not child.is_terminal and (child.code is not None or
                                                                          child.is_malformed)]
    locks = {id(child.parent): threading.Lock() for child in to_run}

    def run_one(child: Node) -> tuple[Node, Any, float, BaseException | None, str]:
        parent = child.parent
        try:
            with locks[id(parent)]:
                if parent is None or parent.state is None:
                    raise RuntimeError(f"node {parent.tag if parent else '?'} has no live notebook state")
                child.state = parent.state.branch()
        except Exception as exc:  # infrastructure boundary
            return child, None, 0.0, exc, "branch-failed"
        if child.code is None:  # an expandable malformed reply: its children resample from the parent's state
            return child, None, 0.0, None, ""
        started = time.perf_counter()
        try:
            execution = child.state.run(child.code, timeout=config.cell_timeout)
        except Exception as exc:  # infrastructure boundary: a cell error is data, this is not
            return child, None, time.perf_counter() - started, exc, "sandbox-failed"
        return child, execution, time.perf_counter() - started, None, ""

    for child, execution, seconds, error, failure in pool.map(run_one, to_run):
        child.timings["cell_s"] = round(seconds, 6)
        if error is not None:
            log.warning("node %s: %s: %s", child.tag, failure, error)
            child.status, child.terminal = NodeStatus.INFRASTRUCTURE, TerminalReason.INFRASTRUCTURE
            child.exec_status, child.observation = failure, f"{type(error).__name__}: {error}"
        elif execution is not None:
            apply_execution(child, child.parent, execution, config)
    for request, child in children:
        request.run.stats.kernel_seconds += child.timings.get("cell_s", 0.0)


def _evaluate_and_backup(children: list[tuple[_Request, Node]], config: SearchConfig, value: Value | None,
                         count_tokens: Callable[[list[Message]], int] | None) -> list[Any]:
    """Apply the depth/context limits, score every new node (one batched value call) and back up.

    Returns the states of new terminal nodes, which the caller releases.
    """
    pending_value: list[tuple[_Request, Node]] = []
    scored: list[tuple[_Request, Node, float]] = []
    unscored: list[tuple[_Request, Node]] = []  # live children (and answers) with no estimate of their own
    spent: list[Any] = []
    for request, child in children:
        tree = request.run.tree
        check_limits(child, lambda c=child, t=tree: t.messages(c), config, count_tokens)
        if child.is_terminal and child.state is not None:
            spent.append(child.state)
            child.state = None
        fixed = fixed_value(child, request.run.task, config)
        if fixed is not None:
            scored.append((request, child, fixed))
        elif not child.is_infrastructure_failure:
            if value is not None and needs_value_model(child, config):
                pending_value.append((request, child))
            else:
                unscored.append((request, child))
    if pending_value:
        estimates = value.evaluate([r.run.tree.messages(c) for r, c in pending_value])  # type: ignore[union-attr]
        if len(estimates) != len(pending_value):
            raise RuntimeError(f"value model returned {len(estimates)} values for {len(pending_value)} histories")
        for run in {id(r.run): r.run for r, _ in pending_value}.values():
            run.stats.value_calls += 1
        for (request, child), estimate in zip(pending_value, estimates):
            number = _finite(estimate)
            if number is None:  # NaN/inf says nothing: never let it reach Q (max/min would turn NaN into +1)
                request.run.stats.invalid_values += 1
                log.warning("node %s: the value model returned %r; treated as no estimate", child.tag, estimate)
                unscored.append((request, child))
            else:
                scored.append((request, child, max(-1.0, min(1.0, number))))
    for _request, child, v in scored:
        child.evaluation = v
        backup(child, v)
    _backup_unscored(unscored, config)
    for request, child in children:
        stats = request.run.stats
        stats.nodes += 1
        stats.answers += child.is_answer
        stats.code_errors += child.status is NodeStatus.CODE_ERROR
        stats.infrastructure_failures += child.is_infrastructure_failure
        stats.model_failures += child.terminal in MODEL_FAILURES or (child.is_malformed and not child.is_terminal)
    return spent


def _finite(estimate: Any) -> float | None:
    try:
        number = float(estimate)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _backup_unscored(unscored: list[tuple[_Request, Node]], config: SearchConfig) -> None:
    """Back up the new nodes that have no value of their own, as ``config.backup_rule`` says.

    PER_CHILD: each is backed up with 0 from itself. EXPANSION (the reference code): none of them is; the node
    that was expanded gets one back-up of 0 for all of them, so K new live children add one zero visit to the
    path, not K (which would dilute the Q-values that become the value model's training targets).
    """
    if config.backup_rule is BackupRule.PER_CHILD:
        for _, child in unscored:
            child.evaluation = 0.0
            backup(child, 0.0)
        return
    expanded: dict[int, Node] = {}
    for _request, child in unscored:
        if child.parent is not None:
            expanded.setdefault(id(child.parent), child.parent)
    for node in expanded.values():
        backup(node, 0.0)


def _expanded_states(requests: list[_Request]) -> list[Any]:
    """A node is expanded once: after its children branched, its own snapshot is no longer needed."""
    spent = []
    for request in requests:
        node = request.node
        if node.state is not None and node.parent is not None:
            spent.append(node.state)
            node.state = None
    return spent


def _finish(run: _TreeRun, config: SearchConfig, value: Value | None, pool: _SandboxPool | None) -> SearchResult:
    """Decide, give the tree's sandbox back to ``pool`` (None: the caller's shared sandbox), build the result."""
    for node in run.tree.nodes:
        if node.state is not None and pool is None:
            _release(node.state)  # a shared sandbox outlives the tree: hand its states back
        node.state = None
    if pool is not None and run.sandbox is not None:
        pool.give(run.sandbox, run.task.id)
    run.stats.nodes = len(run.tree.nodes)
    run.stats.wall_seconds = time.perf_counter() - run.started
    return result_from_tree(run.task.id, run.tree, config, run.stats, value_given=value is not None,
                            error=run.error, interrupted=run.interrupted)


def _notify(on_update: Callable[[TreeUpdate], None] | None, run: _TreeRun, nodes: list[Node]) -> None:
    """Tell the caller about a tree's new nodes (its counters current, wall time included); a failing callback
    is logged, never fatal to the search."""
    if on_update is None or not nodes:
        return
    run.stats.wall_seconds = time.perf_counter() - run.started
    try:
        on_update(TreeUpdate(run.task.id, run.tree, tuple(nodes), run.stats))
    except Exception:
        log.exception("task %s: the on_update callback failed", run.task.id)


def _drop_unfinished(run: _TreeRun) -> None:
    """After an interrupt inside a step: remove that step's nodes, hand back their states, and take back the
    iterations it counted (a continued tree then spends them again)."""
    run.stats.iterations -= run.planned
    run.planned = 0
    for node in run.tree.drop_since(run.step_mark):
        if node.state is not None:
            _release(node.state)
            node.state = None


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
    sandboxes = _SandboxPool(sandbox_factory)
    pool_or_none = sandboxes if close_sandboxes else None
    open_tree = sandboxes.take if close_sandboxes else sandbox_factory
    active: list[_TreeRun] = []
    count_tokens = getattr(policy, "count_tokens", None)
    count_tokens = count_tokens if callable(count_tokens) else None
    call_rng = random.Random(f"{seed}:calls")
    fit_notice = _FitNotice(config)
    step = finished = 0
    pool = ThreadPoolExecutor(max_workers=config.max_concurrent_cells, thread_name_prefix="search-cell")
    try:
        while True:
            admitted = _admit(active, queue, seed, config, stop,
                              lambda r: pool.submit(_open, r, open_tree, config).result(), resume, fit_notice)
            list(pool.map(lambda r: _open(r, open_tree, config),
                          [r for r in admitted if not r.done and not r.opened]))
            if queue.dry:
                sandboxes.close_idle()
            for run in admitted:
                opened = run.tree.nodes if run.resumed else [run.tree.root]
                _notify(on_update, run, opened if run.sandbox is not None else [])
            active.extend(admitted)
            if not active:
                return
            for run in active:
                if not run.done and stop is not None and stop(run.task.id):
                    run.done = run.interrupted = True
            requests = [r for run in active for r in run.plan(config)]
            for run in [r for r in active if r.done]:
                active.remove(run)
                finished += 1
                yield _finish(run, config, value, pool_or_none)
            if not requests:
                continue
            stepping = {id(r.run): r.run for r in requests}.values()
            for run in stepping:
                run.step_mark = len(run.tree.nodes)
            backing_up = False
            try:
                children, calls = _expand(requests, policy, config, call_rng)
                _run_cells(children, pool, config)
                backing_up = True
                spent = _expanded_states(requests) + _evaluate_and_backup(children, config, value, count_tokens)
            except KeyboardInterrupt:
                log.warning("interrupted: ending %d tree(s) with what they have", len(active))
                for run in list(active):
                    if not backing_up:
                        _drop_unfinished(run)
                    run.done = run.interrupted = True
                    active.remove(run)
                    finished += 1
                    yield _finish(run, config, value, pool_or_none)
                return
            list(pool.map(_release, spent))
            for run in stepping:
                _notify(on_update, run, run.tree.nodes[run.step_mark:])
            step += 1
            if on_step is not None:
                on_step(DriverStep(step, len(requests), calls, len(active),
                                   sum(r.stats.iterations for r in active), finished))
    finally:
        pool.shutdown(wait=True)
        if close_sandboxes:
            for run in active:
                if run.sandbox is not None:
                    _close_sandbox(run.sandbox)
            sandboxes.close_idle()


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
