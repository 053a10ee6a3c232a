"""The driver side of the server: queued jobs go into the batched driver, progress goes to the store and the hub.

One policy (loaded once) serves every job. Jobs run in *lanes*: a lane is one thread running
``search.driver.solve_many`` for every job whose search settings are equal apart from the iteration budget
(the driver takes one ``SearchConfig`` for all its trees; each job's own budget ends its tree through the
``stop`` hook), so the trees of all those jobs share each step's model call. Most jobs use the server's
defaults and share one lane; a job with other settings (or another seed) gets a lane of its own, idle lanes
end after a minute. Policy calls of different lanes are serialised (one model). At most ``max_trees`` trees
run at once over all lanes; the rest wait queued.

``solve_many`` admits a task with ``next(tasks, None)`` whenever it has room; ``_Feeder`` answers from the
lane's queue without blocking, so new jobs join while others run. When the driver returns (no active tree)
the lane waits for more jobs and starts it again.

For each tree step the driver calls ``on_update`` (on the lane's thread): the new nodes go to the event hub,
the progress and the compact tree go to the database (every iteration), and tree.json / tree.html are
rewritten at most once a second. A cancelled job's ``stop`` hook answers True and the driver ends that tree at
the next step; its partial tree is kept. On shutdown every tree is stopped and its job re-queued.

A re-queued job (a shutdown, a ``kill -9`` of the server or of its driver process) continues its tree: each
running job's tree is checkpointed into its folder (``checkpoints/``, ``search.checkpoints``) every few seconds
and in full when a shutdown stops it, and the next start hands it to the driver's ``resume`` hook (local
lanes; Ray lanes start over). The job's ``attempts`` still counts the runs.
"""

from __future__ import annotations

import collections
import importlib
import logging
import shutil
import threading
import time
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupiter.serve.events import Event, EventHub, EventType, node_event
from jupiter.serve.jobs import JobSpec
from jupiter.serve.metrics import RateMeter
from jupiter.serve.store import JobStatus, JobStore

__all__ = ["Scheduler", "SerialPolicy", "compact_tree"]

log = logging.getLogger(__name__)

_LANE_IDLE_S = 60.0
_LANE_ITERATIONS = 1_000_000_000  # a lane's driver budget: each job's own budget ends its tree (stop hook)
_FILE_EVERY_S = 1.0
#: a running job's checkpoint is rewritten at most this often: a kill -9 loses at most this much of each tree
#: (a 121-node tree's save is about 10-20 ms, on the lane's thread)
_CHECKPOINT_EVERY_S = 5.0


class SerialPolicy:
    """A policy shared by several driver threads: one ``generate`` at a time (the model is one resource)."""

    def __init__(self, policy: Any) -> None:
        self._policy = policy
        self._lock = threading.Lock()

    def generate(self, histories: list, params: Any) -> list:
        with self._lock:
            return self._policy.generate(histories, params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._policy, name)


class _SerialValue:
    def __init__(self, value: Any) -> None:
        self._value = value
        self._lock = threading.Lock()

    def evaluate(self, histories: list) -> list[float]:
        with self._lock:
            return self._value.evaluate(histories)


#: What a job's first tree imports on the lane thread when nothing has yet: the search, the sandbox, and the
#: writers of a finished tree's files (the CLI keeps them lazy so that ``jupiter --help`` stays fast).
LAZY_MODULES = ("sandbox", "search.driver", "search.decide", "search.result", "search.tree_io", "search.export",
                "search.html", "nbformat", "search.outputs")


def preload() -> None:
    """Import ``LAZY_MODULES`` now. A server calls it before it answers: imported under load instead, they held
    the GIL for about 100 ms of the first submit burst, while the first jobs' requests waited on it."""
    for name in LAZY_MODULES:
        importlib.import_module(name)


def compact_tree(tree: Any) -> dict[str, Any]:
    """The tree as stored in the database: ``tree_to_dict`` without each node's message list (which repeats
    the whole path's prompt; tree.json on disk keeps it)."""
    from search.tree_io import tree_to_dict

    data = tree_to_dict(tree)
    for node in data["nodes"]:
        node.pop("messages", None)
    return data


def _progress(stats: Any, tree: Any) -> dict[str, int]:
    return {"iterations": int(stats.iterations), "nodes": len(tree.nodes),
            "tokens": int(stats.completion_tokens) + int(stats.prompt_tokens or 0),
            "answers": sum(1 for n in tree.nodes if n.is_answer)}


@dataclass
class _Lane:
    key: Hashable
    config: Any
    seed: int
    pending: collections.deque = field(default_factory=collections.deque)
    in_flight: dict[str, JobSpec] = field(default_factory=dict)
    thread: threading.Thread | None = None


class _Feeder:
    """The task iterator a lane's ``solve_many`` pulls from: never blocks, may answer again after running dry."""

    def __init__(self, scheduler: Scheduler, lane: _Lane) -> None:
        self._scheduler, self._lane = scheduler, lane

    def __iter__(self) -> _Feeder:
        return self

    def __next__(self) -> Any:
        spec = self._scheduler._admit(self._lane)
        if spec is None:
            raise StopIteration
        return spec.task


class _LaneCheckpoints:
    """A lane's trees' checkpoints for the run layer: each job's own ``TreeCheckpoints`` in its folder."""

    def __init__(self, scheduler: Scheduler, lane: _Lane) -> None:
        self._scheduler, self._lane = scheduler, lane

    def _of(self, job_id: str) -> Any:
        spec = self._lane.in_flight.get(job_id)
        return None if spec is None else self._scheduler._checkpoint(spec)

    def on_update(self, update: Any) -> None:
        checkpoints = self._of(update.task_id)
        if checkpoints is not None:
            checkpoints.on_update(update)

    def load(self, task: Any) -> Any:
        checkpoints = self._of(task.id)
        return None if checkpoints is None else checkpoints.load(task)

    def save(self, task_id: str, tree: Any, stats: Any) -> Any:
        checkpoints = self._of(task_id)
        return None if checkpoints is None else checkpoints.save(task_id, tree, stats)

    def discard(self, task_id: str) -> None:
        checkpoints = self._of(task_id)
        if checkpoints is not None:
            checkpoints.discard(task_id)


class Scheduler:
    """Runs jobs; thread-safe ``submit`` / ``cancel`` / ``shutdown`` from the web thread.

    ``policy`` is the loaded policy (None in Ray mode, where workers hold it); ``sandbox_factory`` builds a
    sandbox per tree in flight (the driver resets it for the next tree); ``ray_address`` switches the lanes to
    ``search.ray_driver.solve_tasks_ray``.
    """

    def __init__(self, store: JobStore, hub: EventHub, policy: Any, sandbox_factory: Callable[[], Any], *,
                 max_trees: int, value: Any = None, llm_spec: str = "", ray_address: str | None = None,
                 value_model: Path | None = None, sandbox_config: Any = None) -> None:
        self.store, self.hub = store, hub
        self.policy = SerialPolicy(policy) if policy is not None else None
        self.value = _SerialValue(value) if value is not None else None
        self.llm_spec = llm_spec
        self.max_trees = max_trees
        self.ray_address = ray_address
        self.value_model = value_model
        self.sandbox_config = sandbox_config
        self.meter = RateMeter()
        self.failures: collections.Counter[str] = collections.Counter(
            {kind: 0 for kind in ("infrastructure", "model", "code_error", "job", "driver")})
        self._factory = sandbox_factory
        self._sandboxes: weakref.WeakSet[Any] = weakref.WeakSet()
        self._cond = threading.Condition()
        self._lanes: dict[Hashable, _Lane] = {}
        self._running: set[str] = set()
        self._cancelled: set[str] = set()
        self._closing = False
        self._last_file: dict[str, float] = {}
        self._last_tokens: dict[str, int] = {}
        self._stats: dict[str, Any] = {}  # job id -> its tree's live SearchStats (the driver's own object)
        self._saved_nodes: dict[str, int] = {}  # job id -> nodes its continued tree had (counted by an earlier run)
        self._checkpoints: dict[str, Any] = {}  # job id -> its TreeCheckpoints (each keeps its own write times)

    @classmethod
    def for_server(cls, config: Any, store: JobStore, hub: Any, policy: Any, value: Any) -> Scheduler:
        """The scheduler a ``jupiter serve`` with ``config`` (a ``ServeConfig``) runs, in its own process or in
        the driver process: a fork sandbox per tree in flight, with the server's cell timeout and niceness."""
        from sandbox import SandboxConfig
        from search.loaders import sandbox_factory

        # niceness: a driver process is niced itself, but each sandbox runs in a session of its own, which the
        # kernel may schedule as one group (sched_autogroup): the sandbox sets its session's share too
        options: dict[str, Any] = {"timeout_s": config.cell_timeout} if config.cell_timeout else {}
        sandbox_config = SandboxConfig(nice=config.nice, **options)
        return cls(store, hub, policy, sandbox_factory(sandbox_config), max_trees=config.max_trees, value=value,
                   llm_spec=config.llm, ray_address=config.ray_address, value_model=config.value_model,
                   sandbox_config=sandbox_config)

    # -------------------------------------------------------------------------------------- public API

    def submit(self, spec: JobSpec) -> None:
        """Queue an accepted job (its row is already in the store as queued)."""
        lane_config = spec.config
        if self.ray_address is None:
            # The iteration budget is enforced per job through the stop hook, so jobs that differ only in it
            # share a lane (and its model calls); the driver's own budget is out of the way.
            lane_config = spec.config.replace(iterations=_LANE_ITERATIONS)
        key = (lane_config, spec.seed)
        with self._cond:
            if self._closing:
                return  # stays queued in the database; the next start picks it up
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = _Lane(key, lane_config, spec.seed)
                lane.thread = threading.Thread(target=self._lane_main, args=(lane,), daemon=True,
                                               name=f"serve-lane-{len(self._lanes)}")
                lane.thread.start()
            lane.pending.append(spec)
            self._cond.notify_all()

    def cancel(self, job_id: str) -> JobStatus | None:
        """Cancel a job: a queued one at once, a running one at its next step. Returns the status now."""
        with self._cond:
            if self.store.cancel_queued(job_id):
                self._cancelled.add(job_id)
                for lane in self._lanes.values():
                    lane.pending = collections.deque(s for s in lane.pending if s.job_id != job_id)
                self._publish_end(job_id, JobStatus.CANCELLED)
                return JobStatus.CANCELLED
            if job_id in self._running:
                self._cancelled.add(job_id)
                return JobStatus.RUNNING
        record = self.store.get(job_id)
        return record.status if record else None

    @property
    def running(self) -> int:
        with self._cond:
            return len(self._running)

    def sandbox_states(self) -> int:
        """Live notebook states over every open sandbox (a process each on the fork backend)."""
        total = 0
        for box in list(self._sandboxes):
            try:
                total += box.stats().live_states
            except Exception:  # a sandbox closing under us: it holds no state any more
                continue
        return total

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop every tree at its next step and re-queue its job (the next start runs it again)."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
            threads = [lane.thread for lane in self._lanes.values() if lane.thread is not None]
        deadline = time.monotonic() + timeout
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    # ---------------------------------------------------------------------------------- lane threads

    def _admit(self, lane: _Lane) -> JobSpec | None:
        """The lane's next job to start, if there is room under ``max_trees`` (marks it running)."""
        with self._cond:
            while lane.pending and not self._closing:
                if len(self._running) >= self.max_trees:
                    return None
                spec = lane.pending.popleft()
                if spec.job_id in self._cancelled or not self.store.mark_running(spec.job_id):
                    continue  # cancelled while queued
                self._running.add(spec.job_id)
                lane.in_flight[spec.job_id] = spec
                break
            else:
                return None
        shutil.rmtree(spec.paths.output, ignore_errors=True)  # no stale files (a re-queued tree: in checkpoints/)
        self.hub.open(spec.job_id)
        self.hub.publish(spec.job_id, EventType.STATUS, {"status": JobStatus.RUNNING.value})
        return spec

    def _lane_main(self, lane: _Lane) -> None:
        idle_since = time.monotonic()
        while True:
            with self._cond:
                while not self._closing and not (lane.pending and len(self._running) < self.max_trees):
                    if not lane.pending and time.monotonic() - idle_since > _LANE_IDLE_S:
                        del self._lanes[lane.key]
                        return
                    self._cond.wait(timeout=1.0)
                if self._closing:
                    return
            try:
                if self.ray_address is not None:
                    self._run_ray(lane)
                else:
                    self._run_local(lane)
            except Exception as exc:  # the policy or value model failed: the trees in flight are lost
                log.exception("the search driver failed (%d job(s) still in flight fail)", len(lane.in_flight))
                self.failures["driver"] += 1
                for job_id in list(lane.in_flight):
                    self._fail(lane, job_id, f"the search driver failed: {type(exc).__name__}: {exc}")
            idle_since = time.monotonic()

    def _sandbox(self) -> Any:
        box = self._factory()
        self._sandboxes.add(box)
        return box

    def _run_local(self, lane: _Lane) -> None:
        """The lane's trees through the run layer (``search.resumable``): it writes each job's checkpoint as the
        tree grows and when it stops early, and hands back what the trees had if the policy fails."""
        from search.resumable import search_trees

        for result in search_trees(_Feeder(self, lane), self.policy, self._sandbox, lane.config, self.value,
                                   seed=lane.seed, checkpoints=_LaneCheckpoints(self, lane),
                                   resume=lambda task: self._resume(lane, task), discard_finished=False,
                                   on_update=lambda u: self._on_update(lane, u), stop=self._stop):
            self._finish(lane, result)

    def _checkpoint(self, spec: JobSpec) -> Any:
        """The job's checkpoints (its folder's ``checkpoints/``; one file, named after the job)."""
        from search.checkpoints import CHECKPOINTS, TreeCheckpoints

        with self._cond:
            if spec.job_id not in self._checkpoints:
                self._checkpoints[spec.job_id] = TreeCheckpoints(spec.paths.root / CHECKPOINTS, _CHECKPOINT_EVERY_S,
                                                                 settings=spec.config.to_dict())
            return self._checkpoints[spec.job_id]

    def _resume(self, lane: _Lane, task: Any) -> Any:
        """The tree a re-queued job had grown (None for a new job, or one whose checkpoint is unusable)."""
        spec = lane.in_flight.get(task.id)
        if spec is None:
            return None
        saved = self._checkpoint(spec).load(task)
        if saved is not None:
            self._saved_nodes[spec.job_id] = len(saved.tree.nodes)
            self._last_tokens[spec.job_id] = _progress(saved.stats, saved.tree)["tokens"]
        return saved

    def _stop(self, job_id: str) -> bool:
        return self._closing or job_id in self._cancelled or self._budget_spent(job_id)

    def _budget_spent(self, job_id: str) -> bool:
        """The job's own iteration budget is used up (what the driver's check does for a lane of one config)."""
        stats = self._stats.get(job_id)
        spec = next((lane.in_flight.get(job_id) for lane in list(self._lanes.values())
                     if job_id in lane.in_flight), None)
        return stats is not None and spec is not None and stats.iterations >= spec.config.iterations

    # ------------------------------------------------------------------------------------ callbacks

    def _on_update(self, lane: _Lane, update: Any) -> None:
        spec = lane.in_flight.get(update.task_id)
        if spec is None:
            return
        tree = update.tree
        self._stats[spec.job_id] = update.stats
        if tree.task is not None and tree.task.id != spec.task_id:
            tree.task = tree.task.replace(id=spec.task_id)  # files show the user's task id (prompts never do)
        progress = _progress(update.stats, tree)
        tokens = progress["tokens"]
        counted = self._saved_nodes.get(spec.job_id, 0)  # a continued tree's old nodes were counted before
        self.meter.add(nodes=sum(1 for n in update.new_nodes if n.parent is not None and n.order >= counted),
                       tokens=tokens - self._last_tokens.get(spec.job_id, 0))
        self._last_tokens[spec.job_id] = tokens
        events = [Event(EventType.NODE, node_event(n)) for n in update.new_nodes]
        events.append(Event(EventType.ITERATION, progress))
        self.hub.publish_many(spec.job_id, events)
        self.store.update_progress(spec.job_id, progress, compact_tree(tree))
        now = time.monotonic()
        if now - self._last_file.get(spec.job_id, 0.0) >= _FILE_EVERY_S:
            self._last_file[spec.job_id] = now
            from search.outputs import write_partial

            try:  # tree.json and tree.html of the tree still growing
                write_partial(tree, spec.paths.output, spec.task_id,
                              f"running: {progress['iterations']} iterations, {progress['nodes']} nodes, "
                              f"{progress['answers']} answers so far")
            except OSError:
                log.exception("job %s: could not write the partial tree", spec.job_id)

    def _finish(self, lane: _Lane, result: Any) -> None:
        job_id = result.task_id
        spec = lane.in_flight.get(job_id)
        if spec is None:
            log.error("a result for unknown job %s", job_id)
            return
        try:
            budget_spent = self._budget_spent(job_id)
            if self._closing and result.interrupted and job_id not in self._cancelled and not budget_spent:
                # its checkpoint holds the whole tree (the run layer saved it; Ray trees cannot stop early)
                self.store.requeue(job_id)  # stopped by the shutdown, not by the user: run it again next time
                self.hub.drop(job_id)
                return
            self._checkpoint(spec).discard(job_id)
            status = (JobStatus.CANCELLED if job_id in self._cancelled
                      else JobStatus.FAILED if result.error else JobStatus.DONE)
            if result.interrupted and status is not JobStatus.CANCELLED and budget_spent:
                result.interrupted = False  # ended by its own budget, not stopped early
                result.notes = [n for n in result.notes if not n.startswith("stopped early")]
            result.config = spec.config
            result.task_id = spec.task_id
            if result.tree.task is not None and result.tree.task.id != spec.task_id:
                result.tree.task = result.tree.task.replace(id=spec.task_id)
            record, error = None, result.error
            try:
                from search.outputs import write_outputs

                record = write_outputs(result, spec.paths.output, {"job_id": job_id, "llm": self.llm_spec}).record
            except Exception as exc:  # the search is done; losing its files is this job's failure only
                log.exception("job %s: writing the outputs failed", job_id)
                status, error = JobStatus.FAILED, f"writing the outputs failed: {type(exc).__name__}: {exc}"
            stats = result.stats
            self.failures["infrastructure"] += stats.infrastructure_failures
            self.failures["model"] += stats.model_failures
            self.failures["code_error"] += stats.code_errors
            if status is JobStatus.FAILED:
                self.failures["job"] += 1
            progress = _progress(stats, result.tree)
            self.store.finish(job_id, status, record, compact_tree(result.tree), error, progress)
            self._publish_end(job_id, status, result.answer, error)
        finally:
            self._release(lane, job_id)

    def _fail(self, lane: _Lane, job_id: str, error: str) -> None:
        try:
            if self._closing:
                self.store.requeue(job_id)
                return
            status = JobStatus.CANCELLED if job_id in self._cancelled else JobStatus.FAILED
            self.failures["job"] += status is JobStatus.FAILED
            self.store.finish(job_id, status, None, None, error)
            self._publish_end(job_id, status, error=error)
        finally:
            self._release(lane, job_id)

    def _publish_end(self, job_id: str, status: JobStatus, answer: Any = None, error: str | None = None) -> None:
        """A job's last events: its final status, then ``done`` (which ends its channel)."""
        self.hub.publish_many(job_id, [Event(EventType.STATUS, {"status": status.value}),
                                       Event(EventType.DONE, {"status": status.value, "answer": answer,
                                                              "error": error})])

    def _release(self, lane: _Lane, job_id: str) -> None:
        with self._cond:
            lane.in_flight.pop(job_id, None)
            self._running.discard(job_id)
            self._cancelled.discard(job_id)
            self._last_file.pop(job_id, None)
            self._last_tokens.pop(job_id, None)
            self._stats.pop(job_id, None)
            self._saved_nodes.pop(job_id, None)
            self._checkpoints.pop(job_id, None)
            self._cond.notify_all()

    # ------------------------------------------------------------------------------------------ Ray

    def _run_ray(self, lane: _Lane) -> None:
        """Ray mode: the admitted jobs' trees run on Ray tree workers (``solve_tasks_ray``); each finished tree
        comes back whole, so a job's events are its nodes at the end, and a running tree cannot be stopped
        early (a cancel takes effect when its tree returns)."""
        from search.ray_driver import solve_tasks_ray

        specs = list(iter(lambda: self._admit(lane), None))  # every queued job there is room for
        if not specs:
            return
        batch = specs[0].paths.root.parent / "_ray" / f"batch-{specs[0].job_id}"

        def outcome(item: Any) -> None:
            result = item.to_result(lane.config, self.value_model is not None)
            if item.task_id in lane.in_flight:  # the tree arrives whole: its nodes, then the end
                events = [Event(EventType.NODE, node_event(n)) for n in result.tree.nodes]
                events.append(Event(EventType.ITERATION, _progress(result.stats, result.tree)))
                self.hub.publish_many(item.task_id, events)
            self._finish(lane, result)

        solve_tasks_ray([s.task for s in specs], self.llm_spec, lane.config, batch,
                        value_model=self.value_model, address=self.ray_address, seed=lane.seed, progress=False,
                        on_outcome=outcome, sandbox_config=self.sandbox_config)
        for job_id in list(lane.in_flight):
            if job_id in {s.job_id for s in specs}:
                self._fail(lane, job_id, "the Ray run ended without this tree")

