"""The Ray actors of a distributed collection: a task queue, tree workers, a shared policy and value scorer.

Why a pull queue: each tree worker drives many trees at once with the batched engine
(``search.driver.solve_many``), which admits a new task whenever a tree finishes. Feeding it from a queue actor
keeps every worker's batch full until the very end (no static split, no straggler chunks), and the queue
remembers which worker took which task so that the driver can hand a dead worker's trees to another one.

The classes here are plain Python; ``ray_driver`` wraps them with ``ray.remote(...)`` and the resources it
computed from the cluster, so importing this module never needs a running cluster.

A worker's per-task work is one injectable callable, ``SolveFn(tasks, context) -> Iterator[result]``: the
default runs the real engine; tests may pass a trivial one to exercise the machinery alone.
"""

from __future__ import annotations

import collections
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupiter.llm import load_policy
from jupiter.prompts import Message
from jupiter.task import Task
from search.checkpoints import DEFAULT_EVERY_S, TreeCheckpoints
from search.config import SearchConfig
from search.loaders import load_value, sandbox_factory
from search.loaders import sandbox_config as search_sandbox_config
from search.ray_cpus import CpuPin, pin_process
from search.result import SearchResult, SearchStats, result_from_tree
from search.tree import Tree

__all__ = [
    "TreeOutcome",
    "WorkerContext",
    "SolveFn",
    "engine_solve",
    "TaskQueue",
    "TreeWorker",
    "PolicyServer",
    "ValueServer",
    "RemotePolicy",
    "RemoteValue",
    "best_reward",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TreeOutcome:
    """What a worker sends back for one finished tree (the driver writes the files).

    ``stats`` are the worker's own counters of the tree, so a result made from the outcome reads as a local
    run's: ``iterations`` is the number of search iterations its driver ran (not a count read off the tree).
    """

    task_id: str
    attempt: int
    worker: str
    pid: int  # the worker's process id (logs, tests)
    tree: Tree  # execution records dropped
    nodes: int
    seconds: float
    best_reward: float | None
    answer: str | None
    correct: bool | None
    error: str | None
    files: Mapping[str, bytes] = field(default_factory=dict)  # the captured file of each node that wrote it, by tag
    stats: SearchStats = field(default_factory=SearchStats)

    def to_result(self, config: SearchConfig, value_given: bool) -> SearchResult:
        """This tree as a ``SearchResult``: decided from the tree as the local driver decides
        (``search.result.result_from_tree``), with the worker's counters. The one conversion the service and
        the benchmarks use."""
        return result_from_tree(self.task_id, self.tree, config, self.stats, value_given=value_given,
                                error=self.error, notes=[f"solved on Ray worker {self.worker}"],
                                files=dict(self.files))


@dataclass
class WorkerContext:
    """Everything a worker's solve function needs; built once per worker."""

    worker: str
    policy: Any  # jupiter.llm.Policy or RemotePolicy
    sandbox_factory: Callable[[], Any]
    config: SearchConfig
    value: Any  # search.Value or None
    seed: int
    checkpoints: Any = None  # search.checkpoints.TreeCheckpoints in the run folder, or None (no continuing)


SolveFn = Callable[[Iterable[Task], WorkerContext], Iterator[Any]]


def engine_solve(tasks: Iterable[Task], context: WorkerContext) -> Iterator[Any]:
    """The real per-worker work: the run layer over a stream of tasks, one sandbox per tree in flight.

    A finished tree's checkpoint stays until the Ray driver has written the tree (it removes it then)."""
    from search.resumable import search_trees

    return search_trees(tasks, context.policy, context.sandbox_factory, context.config, context.value,
                        seed=context.seed, checkpoints=context.checkpoints, discard_finished=False)


def best_reward(tree: Tree) -> float | None:
    """The highest evaluation among the tree's answer nodes (None when no answer was reached)."""
    values = [n.evaluation for n in tree.nodes if n.is_answer and n.evaluation is not None]
    return max(values) if values else None


class TaskQueue:
    """Pending (task, attempt) pairs plus who took what; one instance per run, as a Ray actor.

    Retried tasks go to the front so that a failure near the end does not become a straggler.
    """

    def __init__(self, items: list[tuple[Task, int]]) -> None:
        self._pending: collections.deque[tuple[Task, int]] = collections.deque(items)
        self._taken: dict[str, dict[str, tuple[Task, int]]] = {}
        self._asked: set[str] = set()

    def take(self, worker: str) -> tuple[Task, int] | None:
        """The next (task, attempt) for ``worker``, or None when nothing is pending."""
        self._asked.add(worker)
        if not self._pending:
            return None
        item = self._pending.popleft()
        self._taken.setdefault(worker, {})[item[0].id] = item
        return item

    def done(self, worker: str, task_id: str) -> None:
        """The driver received ``task_id``'s tree from ``worker``: forget the assignment."""
        self._taken.get(worker, {}).pop(task_id, None)

    def reclaim(self, worker: str) -> list[tuple[Task, int]]:
        """Every task ``worker`` took and did not deliver (it died or failed); forgets them."""
        return list(self._taken.pop(worker, {}).values())

    def put_front(self, items: list[tuple[Task, int]]) -> None:
        self._pending.extendleft(reversed(items))

    def pending(self) -> int:
        return len(self._pending)

    def asked(self, worker: str) -> bool:
        """Whether ``worker`` ever asked for a task (the driver's check that its ``run`` call is executing)."""
        return worker in self._asked


class RemotePolicy:
    """A ``Policy`` whose ``generate`` runs in a shared ``PolicyServer`` actor (one model for all workers)."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def generate(self, histories: list[list[Message]], params: Any) -> list[list[Any]]:
        import ray

        return ray.get(self._handle.generate.remote(histories, params))

    def close(self) -> None:  # the server's owner (the driver) closes it
        return None


class RemoteValue:
    """The ``Value`` protocol over a shared ``ValueServer`` actor."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def evaluate(self, histories: list[list[Message]]) -> list[float]:
        import ray

        return list(ray.get(self._handle.evaluate.remote(histories)))


class PolicyServer:
    """One policy (vLLM in-process, transformers) shared by every worker; calls are served one at a time,
    each already a batch of many trees' histories."""

    def __init__(self, spec: str) -> None:
        self._policy = load_policy(spec)

    def generate(self, histories: list[list[Message]], params: Any) -> list[list[Any]]:
        return self._policy.generate(histories, params)

    def context_window(self) -> int | None:
        """The longest prompt + reply the policy takes, in tokens (None: no limit known)."""
        return self._policy.context_window


class ValueServer:
    """A shared value scorer behind the ``Value`` protocol: ``evaluate(histories) -> list[float]``."""

    def __init__(self, directory: str) -> None:
        self._scorer = load_value(directory)

    def evaluate(self, histories: list[list[Message]]) -> list[float]:
        return [float(v) for v in self._scorer.evaluate(histories)]


class TreeWorker:
    """Drives many trees with the batched engine; pulls tasks from the queue; streams ``TreeOutcome``s.

    The policy is either loaded here from a spec (HTTP client, replay script: cheap and stateless) or a
    ``RemotePolicy`` over the shared ``PolicyServer``. Sandboxes are created in this process (one per tree in
    flight, reset for the next tree), so their runtimes die with it (the sandbox package ties them to the process
    that started them). With ``pin_cpus`` (the Ray CPUs it declared), the worker first pins itself to that many
    free cores of its node (``search.ray_cpus.pin_process``): its sandboxes inherit them, so the whole process
    tree uses what Ray counts.
    """

    def __init__(self, name: str, config: SearchConfig, sandbox_config: Any = None, policy_spec: str | None = None,
                 policy_handle: Any = None, value_handle: Any = None, seed: int = 0,
                 solve_fn: SolveFn | None = None, capture_file: str | None = None,
                 checkpoint_dir: str | None = None, checkpoint_every_s: float = DEFAULT_EVERY_S,
                 pin_cpus: float | None = None) -> None:
        if (policy_spec is None) == (policy_handle is None):
            raise ValueError("TreeWorker: give exactly one of policy_spec and policy_handle")
        # first, so that every thread and process the worker starts from here on inherits the cores
        self._pin = None if pin_cpus is None else pin_process(pin_cpus)
        if self._pin is not None:
            log.info("tree worker %s on cores %s%s", name, self._pin.cores,
                     f" ({self._pin.reason})" if self._pin.reason else "")
        if policy_handle is not None:
            policy: Any = RemotePolicy(policy_handle)
        else:
            policy = load_policy(policy_spec)  # type: ignore[arg-type]

        from search.file_capture import CapturingSandbox, SubmissionCapture

        self._capture = SubmissionCapture(capture_file) if capture_file else None
        capture = self._capture
        settings = sandbox_config if sandbox_config is not None else search_sandbox_config(config)
        factory = sandbox_factory(settings, None if capture is None else lambda box: CapturingSandbox(box, capture))

        self.name = name
        self._solve = solve_fn or engine_solve
        checkpoints = None if checkpoint_dir is None else TreeCheckpoints(Path(checkpoint_dir), checkpoint_every_s,
                                                                          settings=config.to_dict())
        self._context = WorkerContext(worker=name, policy=policy, sandbox_factory=factory, config=config,
                                      value=RemoteValue(value_handle) if value_handle is not None else None,
                                      seed=seed, checkpoints=checkpoints)

    def pid(self) -> int:
        return os.getpid()

    def cpu_pin(self) -> CpuPin | None:
        """Where this worker was pinned (``search.ray_cpus``); None when the driver did not ask for it."""
        return self._pin

    def run(self, queue: Any) -> Iterator[TreeOutcome]:
        """Solve tasks pulled from ``queue`` until it is empty; yield one outcome per finished tree."""
        import ray

        attempts: dict[str, int] = {}

        def pull() -> Iterator[Task]:
            while True:
                item = ray.get(queue.take.remote(self.name))
                if item is None:
                    return
                task, attempt = item
                attempts[task.id] = attempt
                yield task

        from search.file_capture import submission_files

        for result in self._solve(pull(), self._context):
            if result.interrupted and self._context.checkpoints is not None:
                continue  # not finished: the run layer saved it, and the retry of its task continues it
            tree = result.tree
            files: dict[str, bytes] = {}
            if self._capture is not None:  # read before the executions (the capture's keys) are dropped below
                files = submission_files(self._capture, tree.nodes)
                self._capture.forget(tree.nodes)
            for node in tree.nodes:  # the records stay here: the driver writes the tree's files
                node.execution = None
            stats = result.stats
            yield TreeOutcome(
                task_id=result.task_id,
                attempt=attempts.pop(result.task_id, 1),
                worker=self.name,
                pid=os.getpid(),
                tree=tree,
                nodes=int(stats.nodes),
                seconds=round(float(stats.wall_seconds), 3),
                best_reward=best_reward(tree),
                answer=result.answer,
                correct=result.correct,
                error=result.error,
                files=files,
                stats=stats,
            )
