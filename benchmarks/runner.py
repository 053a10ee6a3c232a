"""The run loop shared by every benchmark: tasks in, one result line per finished task out, resumable.

A run is a folder: ``run.json`` (what was run), ``results.jsonl`` (one line per task, written the moment its
tree finishes), ``trees/<id>.json`` (optional), ``checkpoints/<id>.json`` (each tree in flight, as it grows;
removed when the tree finishes), then the report files. The loop skips the ids already in ``results.jsonl``,
hands the rest to the run layer over the batched driver (``search.resumable.search_trees``: many trees share
each policy call; it keeps the checkpoints) or to the Ray driver, and streams results to disk as they come. A
rerun after a kill continues each checkpointed tree where it was saved (``search.checkpoints``), so a run
longer than one sitting loses at most half a minute of every tree; a policy that dies mid-run leaves every
tree in flight saved as it was after its last step.

When the invocation dies (the policy backend crashed, a server went away), ``failure.json`` records the error
and which tasks finished and which did not (``benchmarks.records.RunFailure``), the exception goes on to the
caller, and the reports say the run failed; rerunning searches the unfinished tasks and, once every task is
done, removes the record.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import re
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from benchmarks.records import (
    FAILURE_FILE,
    FailureSource,
    ResultsLog,
    RunFailure,
    TaskRecord,
    clear_failure,
    write_failure,
)
from jupiter.config_model import ConfigModel, Flag
from jupiter.task import Task
from search.checkpoints import CHECKPOINTS, DEFAULT_EVERY_S, TreeCheckpoints
from search.loaders import sandbox_config, sandbox_factory
from search.protocols import Named

__all__ = ["RunOptions", "RunOutcome", "run_loop", "solver_for", "RayUnavailableError", "write_run_info",
           "record_failure", "describe_backend"]

log = logging.getLogger(__name__)

#: (tasks, policy, sandbox_factory, config, value, seed=, [checkpoints=]) → results in finishing order
Solver = Callable[..., Iterator[Any]]


class RayUnavailableError(RuntimeError):
    """``--ray`` was asked for but the Ray driver is not there (or Ray is not installed)."""


class RunOptions(ConfigModel):
    """How a benchmark run executes (not what the search does: that is ``SearchConfig``)."""

    out_dir: Path
    seed: int = 0
    progress: Flag = True  # a tqdm bar on stderr
    save_trees: Flag = True  # trees/<id>.json for each task
    ray: Flag = False
    checkpoints: Flag = True  # checkpoints/<id>.json for each tree in flight, continued by a rerun (not with Ray)
    checkpoint_every_s: float = Field(DEFAULT_EVERY_S, ge=0)  # a tree's checkpoint is rewritten at most this often


@dataclass
class RunOutcome:
    """What one invocation did (a resumed run counts only the tasks it ran itself)."""

    skipped: int = 0
    ran: int = 0
    continued: int = 0  # of those it ran, the trees it continued from a checkpoint
    failed: int = 0
    seconds: float = 0.0
    records: list[TaskRecord] = field(default_factory=list)


def solver_for(ray: bool, llm_spec: str = "", value_model: str | Path | None = None,
               ray_dir: str | Path | None = None, **ray_options: Any) -> Solver:
    """The batched driver, or with ``ray=True`` the Ray driver (``search.ray_driver.solve_tasks_ray``).

    Ray workers build their own policy from ``llm_spec``; its tree files and manifest go to ``ray_dir``;
    ``ray_options`` go to the driver (DSBench: ``capture_file="submission.csv"``).
    """
    if not ray:
        from search.resumable import search_trees

        return search_trees
    try:
        if importlib.util.find_spec("ray") is None:
            raise ImportError("No module named 'ray'")
        importlib.import_module("search.ray_driver")  # Ray's own imports fail here, not mid-run
    except ImportError as exc:
        raise RayUnavailableError(
            f"--ray needs search/ray_driver.py and Ray installed (pip install 'jupiter-nbsearch[ray]'); "
            f"import failed: {exc}"
        ) from None
    if ray_dir is None:
        raise RayUnavailableError("--ray: no folder given for the Ray driver's files")
    from benchmarks.ray_solver import ray_solver

    return ray_solver(llm_spec, value_model, ray_dir, **ray_options)


def _safe_name(task_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", task_id) or "task"


def _changed_settings(before: dict[str, Any], after: dict[str, Any], prefix: str = "") -> list[str]:
    """``"key: old -> new"`` for each setting that differs, nested ones by dotted key (``config.iterations``), so
    that a resumed run's warning says what changed, not only that the whole ``config`` did."""
    changes = []
    for key in sorted(after):
        old, new = before.get(key), after[key]
        if isinstance(old, dict) and isinstance(new, dict):
            changes += _changed_settings(old, new, f"{prefix}{key}.")
        elif old != new:
            changes.append(f"{prefix}{key}: {old!r} -> {new!r}")
    return changes


def write_run_info(out_dir: Path, info: dict[str, Any]) -> None:
    """Write ``run.json``; on a resumed run, keep the first one and warn when the settings changed."""
    path = out_dir / "run.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    if path.is_file():
        try:
            before = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            before = {}
        # compared as stored: a Path given now equals the string read back
        now = json.loads(json.dumps({k: v for k, v in info.items() if k not in ("started", "resumed")}, default=str))
        changed = _changed_settings(before, now)
        if changed:
            log.warning("%s: resuming with different settings (%s); results will mix them", path, "; ".join(changed))
        before.setdefault("resumed", []).append(time.strftime("%Y-%m-%dT%H:%M:%S"))
        info = before
    path.write_text(json.dumps(info, indent=2, default=str) + "\n", encoding="utf-8")


def describe_backend(policy: Any, llm: str = "") -> str:
    """The policy as a failure record names it: ``vllm (--llm default)``, or the spec alone (Ray)."""
    name = policy.name if isinstance(policy, Named) else type(policy).__name__ if policy is not None else ""
    if name and llm:
        return f"{name} (--llm {llm})"
    return name or (f"--llm {llm}" if llm else "")


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= 600 else text[:597] + "..."


def _root_cause(exc: BaseException) -> BaseException:
    seen = {id(exc)}
    while True:
        inner = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if inner is None or id(inner) in seen:
            return exc
        seen.add(id(inner))
        exc = inner


def record_failure(out_dir: Path, exc: BaseException, task_ids: Sequence[str], backend: str) -> tuple[RunFailure, Path]:
    """Write ``failure.json`` for ``exc``: which of ``task_ids`` are in ``results.jsonl`` and which are not."""
    from jupiter.llm.types import PolicyError

    done = ResultsLog(out_dir / "results.jsonl").done_ids
    failure = RunFailure(
        source=FailureSource.POLICY if isinstance(exc, PolicyError) else FailureSource.RUN,
        backend=backend,
        error=_one_line(exc),
        cause=_one_line(_root_cause(exc)),
        finished=tuple(i for i in task_ids if i in done),
        unfinished=tuple(i for i in task_ids if i not in done),
        at=time.strftime("%Y-%m-%dT%H:%M:%S"),
        traceback="".join(traceback.format_exception(exc)),
    )
    return failure, write_failure(out_dir, failure)


def run_loop(
    tasks: Sequence[Task],
    *,
    benchmark: str,
    policy: Any,
    make_sandbox: Callable[[], Any] | None = None,
    config: Any,
    value: Any = None,
    options: RunOptions,
    to_record: Callable[[Any, Task], TaskRecord],
    solver: Solver | None = None,
) -> RunOutcome:
    """Solve every task not yet in ``results.jsonl``; append each record as its tree finishes.

    ``to_record(result, task)`` turns a ``SearchResult`` into the task's line (benchmark-specific fields);
    ``make_sandbox`` defaults to a sandbox with ``config``'s settings. With ``options.checkpoints`` (and not
    Ray) every tree in flight is saved as it grows and a rerun continues it; without, interrupting loses the
    trees in flight. A tree the driver ended early (``result.interrupted``) is not a finished task: it is not
    recorded but checkpointed (a rerun continues it), and once the driver has handed back every tree the
    ``KeyboardInterrupt`` is raised again for the caller. Any other exception (a dead policy backend)
    goes to the caller, which records it (``record_failure``); a later call that finishes every task removes
    that record.
    """
    results = ResultsLog(options.out_dir / "results.jsonl")
    done = results.done_ids
    pending = [t for t in tasks if t.id not in done]
    outcome = RunOutcome(skipped=len(tasks) - len(pending))
    if not pending:
        if clear_failure(options.out_dir):
            log.info("%s: every task is finished; removed the old %s", options.out_dir, FAILURE_FILE)
        return outcome
    by_id = {t.id: t for t in pending}
    solve = solver or solver_for(options.ray)
    make_sandbox = make_sandbox or sandbox_factory(sandbox_config(config))
    started = time.perf_counter()
    bar = None
    if options.progress:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), initial=outcome.skipped, desc=benchmark, unit="task", dynamic_ncols=True)
    interrupted: list[str] = []
    checkpoints = (TreeCheckpoints(options.out_dir / CHECKPOINTS, options.checkpoint_every_s, config.to_dict())
                   if options.checkpoints and not options.ray else None)
    # the local run layer continues, saves and removes the checkpoints (search.resumable); Ray's workers keep their own
    hooks = {} if checkpoints is None else {"checkpoints": checkpoints}
    try:
        for result in solve(pending, policy, make_sandbox, config, value, seed=options.seed, **hooks):
            task = by_id.get(str(result.task_id))
            if task is None:
                log.warning("the driver returned an unknown task id %r", result.task_id)
                continue
            if result.interrupted:  # saved by the run layer, continued by a rerun
                interrupted.append(task.id)
                continue
            record = to_record(result, task)
            results.append(record)
            if options.save_trees and result.tree is not None:
                from search.tree_io import save_tree

                save_tree(result.tree, options.out_dir / "trees" / f"{_safe_name(task.id)}.json")
            outcome.ran += 1
            outcome.continued += result.stats.resumes > 0
            outcome.failed += record.error is not None
            outcome.records.append(record)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(errors=outcome.failed)
    finally:
        if bar is not None:
            bar.close()
        outcome.seconds = time.perf_counter() - started
    if interrupted:
        again = "continues them from their checkpoints" if checkpoints is not None else "searches them again"
        log.warning("interrupted: %d unfinished task(s) not recorded (%s); a rerun %s",
                    len(interrupted), ", ".join(interrupted[:5]), again)
        raise KeyboardInterrupt
    if results.done_ids >= {t.id for t in tasks}:
        clear_failure(options.out_dir)
    return outcome
