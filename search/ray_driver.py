"""Batch solving on Ray: ``solve_tasks_ray(tasks, llm_spec, config, out_dir, ...)``.

The driver (this process) starts a task-queue actor, N tree-worker actors (each runs the batched engine over
tasks it pulls from the queue) and, when the policy is a local model, one shared policy actor (``num_gpus=1``
where the cluster has GPUs), plus a shared value-scorer actor when a value model is given. Workers stream one
``TreeOutcome`` per finished tree; the driver alone writes the tree file (atomically) and then the manifest
line, so every tree is written exactly once however workers fail.

Failure handling: when a worker's stream breaks, the driver maps the exception to a ``DeathCause``, reclaims
the tasks that worker had taken and not delivered, records them ``worker_died`` and queues them again at the
front with ``attempt + 1`` — at most ``max_retries`` times, then ``gave_up``. A dead worker is replaced (a
bounded number of times); a worker that only raised is reused. Ctrl-C kills the actors (their sandboxes die
with them) and leaves a directory that a rerun resumes: finished ids are skipped.

Connection: ``address`` (or ``RAY_ADDRESS``, which ``ray job submit`` sets) joins a cluster; with neither, a
private local Ray instance is started (never an unrelated cluster found on this machine).
"""

from __future__ import annotations

import logging
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from jupiter.config_model import ConfigModel, Flag, PositiveFloat
from jupiter.task import Task
from search.checkpoints import CHECKPOINTS, DEFAULT_EVERY_S, TreeCheckpoints
from search.config import SearchConfig, fit_context
from search.outputs import write_json_atomic
from search.ray_actors import (
    PolicyServer,
    SolveFn,
    TaskQueue,
    TreeOutcome,
    TreeWorker,
    ValueServer,
)
from search.ray_failures import classify_failure
from search.ray_manifest import (
    SUMMARY_NAME,
    TREES_DIR,
    DeathCause,
    Manifest,
    ManifestRecord,
    TaskStatus,
    now,
    summarise_ids,
    tree_file_name,
)
from search.tree_io import save_tree

__all__ = ["RayResources", "RunSummary", "solve_tasks_ray", "policy_is_shared", "absolute_spec", "plan_workers",
           "describe"]

log = logging.getLogger(__name__)

_MB = 2**20
#: Specs whose policy is a light client each worker can hold itself; anything else is a model in memory.
_PER_WORKER_SCHEMES = ("http://", "https://", "replay:")


class RayResources(ConfigModel):
    """What each actor asks Ray for. Memory is declared so that Ray's scheduler (not the kernel's OOM killer)
    decides how many workers fit on a node.

    Fields:
        worker_cpus: CPUs per tree worker (its cells run in sandbox processes it owns).
        worker_memory_mb: memory per tree worker, including its sandboxes' notebook states.
        policy_cpus, policy_memory_mb: the shared policy actor on a CPU-only cluster (GPU clusters: 1 GPU).
        value_memory_mb: the shared value-scorer actor.
        pin_cpus: pin each tree worker, its sandboxes included, to ``worker_cpus`` free cores of its node
            (``search.ray_cpus``), so that it uses no more than Ray counts; a fractional ``worker_cpus`` is not
            pinned. False: workers run wherever the kernel puts them (and a worker may keep several cores busy).
    """

    worker_cpus: PositiveFloat = 1.0
    worker_memory_mb: Annotated[int, Field(strict=True, ge=64)] = 2048  # MiB
    policy_cpus: PositiveFloat = 1.0
    policy_memory_mb: Annotated[int, Field(strict=True, ge=64)] = 6144
    value_memory_mb: Annotated[int, Field(strict=True, ge=64)] = 4096
    pin_cpus: Flag = True


@dataclass(frozen=True)
class RunSummary:
    """The outcome of one ``solve_tasks_ray`` run (also written to ``OUT/summary.json``).

    ``solved`` counts trees with a best reward of 1 (some path reached the label); ``nodes_per_s`` is
    nodes of the trees finished in this run over the run's wall time.
    """

    out_dir: str
    tasks: int
    skipped: int
    done: int
    tree_errors: int
    gave_up: int
    retries: int
    worker_deaths: dict[str, int]
    nodes: int
    solved: int
    mean_best_reward: float | None
    wall_seconds: float
    nodes_per_s: float
    trees_per_s: float
    workers: int
    shared_policy: bool = False  # one policy actor served every worker (a local model)
    interrupted: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def absolute_spec(spec: str) -> str:
    """``replay:rel.json`` → ``replay:/abs/rel.json`` (workers do not share the driver's cwd)."""
    if spec.startswith("replay:"):
        return "replay:" + str(Path(spec[len("replay:"):]).expanduser().resolve())
    return spec


def policy_is_shared(spec: str) -> bool:
    """Whether the spec names a model held in memory (one shared actor) rather than a light client."""
    return not spec.startswith(_PER_WORKER_SCHEMES)


def plan_workers(cluster: dict[str, float], resources: RayResources, shared_policy: bool, with_value: bool,
                 tasks: int, requested: int | None = None) -> int:
    """How many tree workers to start: what the cluster's CPUs and memory allow after the shared actors,
    at most one per task, at least one. An explicit ``requested`` count wins (capped by ``tasks``)."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"workers: must be >= 1, got {requested}")
        return max(1, min(requested, tasks))
    cpus = float(cluster.get("CPU", 1.0))
    gpus = float(cluster.get("GPU", 0.0))
    memory = float(cluster.get("memory", 0.0))
    if shared_policy:
        memory -= resources.policy_memory_mb * _MB
        if gpus < 1:
            cpus -= resources.policy_cpus
    if with_value:
        memory -= resources.value_memory_mb * _MB
    by_cpu = int(cpus // resources.worker_cpus)
    by_memory = int(memory // (resources.worker_memory_mb * _MB)) if cluster.get("memory") else by_cpu
    return max(1, min(by_cpu, by_memory, tasks))


#: Seconds a started worker may hold its ``run`` call without asking the queue for a task: far more than a
#: started actor needs (it asks first thing), so a worker past it is stuck, and is replaced instead of awaited.
FIRST_TAKE_S = 60.0


@dataclass
class _Slot:
    """One tree worker: its handle, the probe that says it started, and its ``run`` stream once submitted.

    ``run`` is submitted only after the probe (``pid``) answered, so a worker still being created never holds a
    call; ``asked`` turns true once the queue has seen it ask for a task (its ``run`` is executing)."""

    name: str
    handle: Any
    probe: Any = None
    started: bool = False
    stream: Any = None
    run_since: float = 0.0
    asked: bool = False


@dataclass
class _Tally:
    """Mutable counters of the running driver (private)."""

    done: int = 0
    tree_errors: int = 0
    gave_up: int = 0
    retries: int = 0
    nodes: int = 0
    solved: int = 0
    rewards: list[float] = field(default_factory=list)
    deaths: Counter = field(default_factory=Counter)


def _connect(address: str | None, init_kwargs: dict[str, Any] | None) -> bool:
    """Join or start Ray; returns True when this call started it (and so must shut it down)."""
    import ray

    if ray.is_initialized():
        return False
    target = address or os.environ.get("RAY_ADDRESS") or "local"
    kwargs: dict[str, Any] = {"address": target, "logging_level": logging.WARNING}
    if target == "local":
        kwargs["include_dashboard"] = False
    kwargs.update(init_kwargs or {})
    ray.init(**kwargs)
    return True


class _Run:
    """One driver run (private): actors, the receive loop, failure handling, bookkeeping."""

    def __init__(self, todo: list[Task], attempts_before: dict[str, int], llm_spec: str, config: SearchConfig,
                 out_dir: Path, value_model: str | None, workers: int | None, sandbox_config: Any,
                 max_retries: int, seed: int, resources: RayResources, solve_fn: SolveFn | None,
                 on_outcome: Callable[[TreeOutcome], None] | None, progress: Any,
                 share_policy: bool | None, capture_file: str | None = None,
                 checkpoint_every_s: float = DEFAULT_EVERY_S) -> None:
        import ray

        self.ray = ray
        self.config = config
        self.out_dir = out_dir
        self.manifest = Manifest(out_dir)
        self.trees_dir = out_dir / TREES_DIR
        self.max_retries = max_retries
        self.seed = seed
        self.resources = resources
        self.solve_fn = solve_fn
        self.sandbox_config = sandbox_config
        self.capture_file = capture_file
        # the workers checkpoint their trees into the run folder (one machine, or one shared filesystem), except
        # when they capture files: those of a continued tree's earlier nodes died with the old worker
        self.checkpoints = TreeCheckpoints(out_dir / CHECKPOINTS)
        self.checkpoints_dir = None if capture_file else str(out_dir / CHECKPOINTS)
        self.checkpoint_every_s = checkpoint_every_s
        self.on_outcome = on_outcome
        self.progress = progress
        self.tally = _Tally()
        self.delivered: set[str] = set()
        self.first_attempt = {t.id: attempts_before.get(t.id, 0) + 1 for t in todo}
        self.spec = absolute_spec(llm_spec)
        cluster = ray.cluster_resources()
        shared = policy_is_shared(self.spec) if share_policy is None else share_policy
        self.count = plan_workers(cluster, resources, shared, value_model is not None, len(todo), workers)
        fits = plan_workers(cluster, resources, shared, value_model is not None, len(todo))
        if self.count > fits:
            log.warning("%d workers requested but the cluster's free CPUs/memory fit %d: the rest wait for "
                        "resources (Ray queues them)", self.count, fits)
        self.policy_handle = self._start_policy(cluster) if shared else None
        if self.policy_handle is not None:  # a path must end before the engine's window, as a local run's does
            self.config = fit_context(self.config, ray.get(self.policy_handle.context_window.remote()))
        self.value_handle = self._start_value(value_model) if value_model else None
        self.queue = ray.remote(TaskQueue).options(num_cpus=0, max_restarts=0).remote(
            [(t, self.first_attempt[t.id]) for t in todo])
        self.spawned = 0
        self.max_spawns = self.count * (max_retries + 2)
        self.slots: list[_Slot] = [self._spawn() for _ in range(self.count)]
        self._wait_for_placement()
        self.started = time.perf_counter()

    # ------------------------------------------------------------------ actors
    def _start_policy(self, cluster: dict[str, float]) -> Any:
        options: dict[str, Any] = {"memory": self.resources.policy_memory_mb * _MB, "max_restarts": 0}
        if cluster.get("GPU", 0) >= 1:
            options.update(num_gpus=1, num_cpus=1)
        else:
            options.update(num_cpus=self.resources.policy_cpus)
        log.info("starting the shared policy actor for %s (%s)", self.spec, options)
        return self.ray.remote(PolicyServer).options(**options).remote(self.spec)

    def _start_value(self, directory: str) -> Any:
        log.info("starting the shared value-scorer actor for %s", directory)
        return self.ray.remote(ValueServer).options(
            num_cpus=1, memory=self.resources.value_memory_mb * _MB, max_restarts=0).remote(str(directory))

    def _spawn(self) -> _Slot:
        name = f"w{self.spawned}"
        self.spawned += 1
        handle = self.ray.remote(TreeWorker).options(
            num_cpus=self.resources.worker_cpus, memory=self.resources.worker_memory_mb * _MB,
            max_restarts=0, max_task_retries=0,
        ).remote(
            name, self.config, sandbox_config=self.sandbox_config,
            policy_spec=None if self.policy_handle is not None else self.spec,
            policy_handle=self.policy_handle, value_handle=self.value_handle,
            seed=self.seed, solve_fn=self.solve_fn, capture_file=self.capture_file,
            checkpoint_dir=self.checkpoints_dir, checkpoint_every_s=self.checkpoint_every_s,
            pin_cpus=self.resources.worker_cpus if self.resources.pin_cpus else None,
        )
        return _Slot(name, handle, probe=handle.pid.remote())

    def _wait_for_placement(self, timeout_s: float = 60.0) -> None:
        """Warn (once, naming the resources) when workers cannot be placed: Ray would wait silently."""
        probes = [slot.probe for slot in self.slots]
        _ready, waiting = self.ray.wait(probes, num_returns=len(probes), timeout=timeout_s)
        if waiting:
            log.warning("%d of %d worker(s) not started after %.0f s: the cluster lacks %s CPU(s) and %d MiB per "
                        "worker (check `ray status`; lower --workers or --worker-memory-mb)", len(waiting),
                        len(probes), timeout_s, self.resources.worker_cpus, self.resources.worker_memory_mb)

    def kill_all(self) -> None:
        for handle in [s.handle for s in self.slots] + [self.queue, self.policy_handle, self.value_handle]:
            if handle is not None:
                self._kill(handle)

    def _kill(self, handle: Any) -> None:
        try:
            self.ray.kill(handle, no_restart=True)
        except Exception:  # already dead: nothing to end
            log.debug("ray.kill failed", exc_info=True)

    # ------------------------------------------------------------------ loop
    def loop(self) -> None:
        ray = self.ray
        while True:
            pending = ray.get(self.queue.pending.remote())
            self._note_started()
            for slot in self.slots:
                if slot.stream is None and slot.started and pending > 0:
                    slot.stream = slot.handle.run.remote(self.queue)
                    slot.run_since, slot.asked = time.monotonic(), False
            if pending > 0 and not self.slots:
                self._give_up_pending(DeathCause.UNKNOWN, "no worker left to run the task")
                continue
            streams = {s.stream: s for s in self.slots if s.stream is not None}
            starting = [s.probe for s in self.slots if not s.started] if pending > 0 else []
            if not streams and not starting:
                return
            ready, _ = ray.wait(list(streams) + starting, num_returns=1, timeout=1.0)
            for ref in ready:
                if ref in streams:
                    self._receive(streams[ref])
            self._replace_stuck()

    def _note_started(self) -> None:
        """Mark the workers whose probe answered; a worker that died while starting is handled as a death."""
        for slot in [s for s in self.slots if not s.started]:
            done, _ = self.ray.wait([slot.probe], timeout=0)
            if not done:
                continue
            try:
                self.ray.get(slot.probe)
            except Exception as exc:  # it died in its constructor (bad spec, no memory): Ray's errors are data
                self._worker_failed(slot, exc)
                continue
            slot.started = True

    def _replace_stuck(self) -> None:
        """Replace a started worker that held its ``run`` call for ``FIRST_TAKE_S`` without asking for a task.

        Why: under load Ray has been seen to leave a replacement worker idle with its ``run`` call never
        executed; the driver then waited on that stream for ever. Such a worker took nothing, so nothing is lost.
        """
        late = [s for s in self.slots if s.stream is not None and not s.asked
                and time.monotonic() - s.run_since > FIRST_TAKE_S]
        for slot in late:
            if self.ray.get(self.queue.asked.remote(slot.name)):
                slot.asked = True
                continue
            log.warning("worker %s asked for no task %.0f s after its run call: replacing it", slot.name,
                        FIRST_TAKE_S)
            self.tally.deaths[DeathCause.UNKNOWN.value] += 1
            self._drop(slot)

    def _receive(self, slot: _Slot) -> None:
        try:
            ref = next(slot.stream)
            outcome: TreeOutcome = self.ray.get(ref)
        except StopIteration:
            slot.stream = None
            return
        except Exception as exc:  # the worker died or raised: Ray's errors are data here
            slot.stream = None
            self._worker_failed(slot, exc)
            return
        self._record(outcome)

    def _record(self, outcome: TreeOutcome) -> None:
        self.queue.done.remote(outcome.worker, outcome.task_id)
        if outcome.task_id in self.delivered:  # cannot happen with one queue; never write a tree twice
            log.error("task %s delivered twice (worker %s); keeping the first", outcome.task_id, outcome.worker)
            return
        self.delivered.add(outcome.task_id)
        path = save_tree(outcome.tree, self.trees_dir / tree_file_name(outcome.task_id), durable=True)
        self.checkpoints.discard(outcome.task_id)  # the finished tree is written: its checkpoint is spent
        status = TaskStatus.OK if outcome.error is None else TaskStatus.TREE_ERROR
        self.manifest.append(ManifestRecord(
            task_id=outcome.task_id, status=status, attempt=outcome.attempt, worker=outcome.worker,
            best_reward=outcome.best_reward, nodes=outcome.nodes, seconds=outcome.seconds,
            answer=outcome.answer, correct=outcome.correct, tree_file=str(path.relative_to(self.out_dir)),
            error=outcome.error, finished_at=now(),
        ))
        tally = self.tally
        tally.done += status is TaskStatus.OK
        tally.tree_errors += status is TaskStatus.TREE_ERROR
        tally.nodes += outcome.nodes
        if outcome.best_reward is not None:
            tally.rewards.append(outcome.best_reward)
            tally.solved += outcome.best_reward >= 1.0
        if self.progress is not None:
            self.progress.update(1)
            self.progress.set_postfix(self._postfix(), refresh=False)
        if self.on_outcome is not None:
            self.on_outcome(outcome)

    def _postfix(self) -> dict[str, Any]:
        elapsed = max(1e-9, time.perf_counter() - self.started)
        tally = self.tally
        mean = sum(tally.rewards) / len(tally.rewards) if tally.rewards else float("nan")
        return {"nodes/s": f"{tally.nodes / elapsed:.1f}", "solved": tally.solved,
                "reward": f"{mean:+.2f}", "retries": tally.retries}

    def _worker_failed(self, slot: _Slot, exc: BaseException) -> None:
        cause, detail = classify_failure(exc)
        self.tally.deaths[cause.value] += 1
        lost = self.ray.get(self.queue.reclaim.remote(slot.name))
        lost = [(task, attempt) for task, attempt in lost if task.id not in self.delivered]
        log.warning("worker %s failed (%s); %d task(s) to retry: %s — %s", slot.name, cause.value, len(lost),
                    summarise_ids([t.id for t, _ in lost]), detail)
        retry: list[tuple[Task, int]] = []
        for task, attempt in lost:
            gave_up = attempt - self.first_attempt[task.id] >= self.max_retries
            self.manifest.append(ManifestRecord(
                task_id=task.id, status=TaskStatus.GAVE_UP if gave_up else TaskStatus.WORKER_DIED,
                attempt=attempt, worker=slot.name, cause=cause, error=detail, finished_at=now(),
            ))
            if gave_up:
                self.tally.gave_up += 1
                if self.progress is not None:
                    self.progress.update(1)
            else:
                self.tally.retries += 1
                retry.append((task, attempt + 1))
        if retry:
            self.ray.get(self.queue.put_front.remote(retry))
        if cause is DeathCause.ERROR and slot.started and self._alive(slot):
            return  # the worker raised but lives: it takes tasks again on the next loop
        self._drop(slot)

    def _drop(self, slot: _Slot) -> None:
        """Kill ``slot``'s worker and start another in its place (a bounded number of times)."""
        self.slots.remove(slot)
        self._kill(slot.handle)
        if self.spawned < self.max_spawns:
            self.slots.append(self._spawn())
        else:
            log.error("worker %s not replaced: %d workers started already", slot.name, self.spawned)

    def _alive(self, slot: _Slot) -> bool:
        try:
            self.ray.get(slot.handle.pid.remote(), timeout=30)
            return True
        except Exception:  # any failure to answer means the actor is unusable
            return False

    def _give_up_pending(self, cause: DeathCause, why: str) -> None:
        while True:
            item = self.ray.get(self.queue.take.remote("__driver__"))
            if item is None:
                return
            task, attempt = item
            self.manifest.append(ManifestRecord(task_id=task.id, status=TaskStatus.GAVE_UP, attempt=attempt,
                                                cause=cause, error=why, finished_at=now()))
            self.tally.gave_up += 1

    def summary(self, total: int, skipped: int, interrupted: bool) -> RunSummary:
        elapsed = time.perf_counter() - self.started
        tally = self.tally
        finished = tally.done + tally.tree_errors
        return RunSummary(
            out_dir=str(self.out_dir), tasks=total, skipped=skipped, done=tally.done, tree_errors=tally.tree_errors,
            gave_up=tally.gave_up, retries=tally.retries, worker_deaths=dict(tally.deaths), nodes=tally.nodes,
            solved=tally.solved,
            mean_best_reward=round(sum(tally.rewards) / len(tally.rewards), 4) if tally.rewards else None,
            wall_seconds=round(elapsed, 3), nodes_per_s=round(tally.nodes / elapsed, 3) if elapsed > 0 else 0.0,
            trees_per_s=round(finished / elapsed, 4) if elapsed > 0 else 0.0, workers=self.count,
            shared_policy=self.policy_handle is not None, interrupted=interrupted,
        )


def solve_tasks_ray(
    tasks: Sequence[Task] | Iterable[Task],
    llm_spec: str,
    config: SearchConfig,
    out_dir: str | Path,
    value_model: str | Path | None = None,
    address: str | None = None,
    workers: int | None = None,
    *,
    sandbox_config: Any = None,
    max_retries: int = 2,
    seed: int = 0,
    resources: RayResources = RayResources(),
    progress: bool = True,
    solve_fn: SolveFn | None = None,
    on_outcome: Callable[[TreeOutcome], None] | None = None,
    ray_init: dict[str, Any] | None = None,
    share_policy: bool | None = None,
    capture_file: str | None = None,
    checkpoint_every_s: float = DEFAULT_EVERY_S,
) -> RunSummary:
    """Solve every task on Ray; write ``OUT/trees/*.json``, ``OUT/manifest.jsonl`` and ``OUT/summary.json``.

    Tasks whose id the manifest already records as ``ok`` are skipped. ``workers`` (default: what the cluster's
    CPUs and memory allow) tree workers each run ``config.max_trees_in_flight`` trees at once. A task whose
    worker dies is retried at most ``max_retries`` times. ``solve_fn`` replaces the engine (tests);
    ``on_outcome`` is called in the driver after each tree's files are written. ``share_policy`` forces (True)
    or forbids (False) one shared policy actor; None decides by the spec (``policy_is_shared``).
    ``capture_file`` (e.g. ``submission.csv``): workers read that file of every answer node's state and send
    it back in ``TreeOutcome.files`` (DSBench scores them). Without it, the workers checkpoint each tree in
    flight into ``OUT/checkpoints/`` at most every ``checkpoint_every_s`` seconds (``search.checkpoints``), and
    a worker that takes a task whose checkpoint is there (a retry after a worker died, a rerun after a kill)
    continues that tree; this needs ``OUT`` on the workers' filesystem (one machine or a shared one), elsewhere
    each worker's checkpoints stay on its own node. Side effects: starts (and then
    shuts down) a private local Ray instance unless Ray is initialised or an address is given; shows a tqdm bar
    on stderr when ``progress``. Raises KeyboardInterrupt after writing the summary when interrupted.
    """
    if max_retries < 0:
        raise ValueError(f"max_retries: must be >= 0, got {max_retries}")
    out = Path(out_dir).expanduser().resolve()
    out.mkdir(parents=True, exist_ok=True)
    tasks = list(tasks)
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise ValueError(f"tasks: duplicate ids {summarise_ids(sorted({i for i in ids if ids.count(i) > 1}))}")
    manifest = Manifest(out)
    finished = manifest.finished_ids()
    todo = [t for t in tasks if t.id not in finished]
    skipped = len(tasks) - len(todo)
    if skipped:
        log.info("%s: skipping %d finished task(s)", out, skipped)
    if not todo:
        summary = RunSummary(out_dir=str(out), tasks=len(tasks), skipped=skipped, done=0, tree_errors=0, gave_up=0,
                             retries=0, worker_deaths={}, nodes=0, solved=0, mean_best_reward=None,
                             wall_seconds=0.0, nodes_per_s=0.0, trees_per_s=0.0, workers=0)
        write_json_atomic(summary.to_dict(), out / SUMMARY_NAME)
        return summary
    started_ray = _connect(address, ray_init)
    bar = None
    run: _Run | None = None
    interrupted = False
    try:
        if progress:
            from tqdm import tqdm

            bar = tqdm(total=len(todo), desc="trees", unit="tree", dynamic_ncols=True)
        run = _Run(todo, manifest.attempts(), llm_spec, config, out, None if value_model is None else str(value_model),
                   workers, sandbox_config, max_retries, seed, resources, solve_fn, on_outcome, bar, share_policy,
                   capture_file, checkpoint_every_s)
        run.loop()
    except KeyboardInterrupt:
        interrupted = True
        log.warning("interrupted: %s is resumable (finished trees are in its manifest)", out)
        raise
    finally:
        if bar is not None:
            bar.close()
        if run is not None:
            run.kill_all()
            summary = run.summary(len(tasks), skipped, interrupted)
            write_json_atomic(summary.to_dict(), out / SUMMARY_NAME)
            log.info("%s", describe(summary))
        if started_ray:
            import ray

            ray.shutdown()
    return summary


def describe(summary: RunSummary) -> str:
    """A one-line human summary (the CLI prints it after the JSON line)."""
    deaths = ", ".join(f"{k}={v}" for k, v in summary.worker_deaths.items()) or "none"
    return (f"{summary.done} tree(s) done, {summary.skipped} skipped, {summary.tree_errors} tree error(s), "
            f"{summary.gave_up} given up, {summary.retries} retried (worker deaths: {deaths}); "
            f"{summary.nodes} nodes in {summary.wall_seconds:.1f} s ({summary.nodes_per_s:.1f} nodes/s) "
            f"on {summary.workers} worker(s); solved {summary.solved}")

