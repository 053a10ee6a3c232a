"""The Ray layer on a private local Ray (2 CPUs): real engine, real replay policy, real sandboxes.

One module-scoped Ray instance serves every test here (starting Ray costs seconds on this 2-core machine).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from ray_fixtures import N_TASKS, write_replay, write_tasks

from jupiter.task import load_tasks
from search import Mode, SearchConfig, load_tree
from search.ray_driver import RayResources, solve_tasks_ray
from search.ray_manifest import DeathCause, Manifest, TaskStatus, tree_file_name

psutil = pytest.importorskip("psutil")

CONFIG = SearchConfig(mode=Mode.COLLECT, iterations=8, temperature=1.0, max_trees_in_flight=2, cell_timeout=60)


def _check_trees(out: Path, tasks) -> None:
    """Every task has exactly one OK manifest line and a tree file that loads and found the label."""
    records = Manifest(out).read()
    ok = [r for r in records if r.status is TaskStatus.OK]
    assert sorted(r.task_id for r in ok) == sorted(t.id for t in tasks)  # each exactly once
    files = sorted(p.name for p in (out / "trees").iterdir())
    assert files == sorted(tree_file_name(t.id) for t in tasks)  # no temporary files left, no extras
    for task in tasks:
        record = next(r for r in ok if r.task_id == task.id)
        tree = load_tree(out / record.tree_file)
        assert tree.task.id == task.id
        assert len(tree.nodes) == record.nodes > 3
        answers = [n for n in tree.nodes if n.is_answer]
        assert {n.final_answer for n in answers if n.evaluation == 1.0} == {task.label}
        assert any(n.evaluation == -1.0 for n in answers)  # the wrong guess was scored too
        assert record.best_reward == 1.0 and record.correct is True and record.answer == task.label


def test_ten_tasks_then_rerun_skips(ray_local, task_files, tmp_path):
    """Two workers share one policy actor (the path a local model takes) holding the real replay policy."""
    tasks_path, replay = task_files
    tasks = load_tasks(tasks_path)
    assert len(tasks) == N_TASKS
    out = tmp_path / "collect"
    summary = solve_tasks_ray(tasks, f"replay:{replay}", CONFIG, out, workers=2, progress=False, share_policy=True,
                              resources=RayResources(worker_memory_mb=1024, policy_memory_mb=512))
    assert (summary.done, summary.skipped, summary.gave_up, summary.retries) == (N_TASKS, 0, 0, 0)
    assert summary.solved == N_TASKS and summary.workers == 2 and summary.nodes > 0 and summary.shared_policy
    _check_trees(out, tasks)
    workers = {r.worker for r in Manifest(out).read()}
    assert workers == {"w0", "w1"}  # both workers pulled tasks from the queue
    assert json.loads((out / "summary.json").read_text())["done"] == N_TASKS

    lines = (out / "manifest.jsonl").read_text()
    mtimes = {p.name: p.stat().st_mtime_ns for p in (out / "trees").iterdir()}
    again = solve_tasks_ray(tasks, f"replay:{replay}", CONFIG, out, workers=2, progress=False)
    assert (again.done, again.skipped) == (0, N_TASKS)
    assert (out / "manifest.jsonl").read_text() == lines
    assert {p.name: p.stat().st_mtime_ns for p in (out / "trees").iterdir()} == mtimes


def _alive(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def test_killed_worker_yields_every_tree_once_and_no_orphans(ray_local, task_files, tmp_path):
    tasks_path, replay = task_files
    tasks = load_tasks(tasks_path)
    out = tmp_path / "collect"
    killed: dict[str, object] = {}

    def kill_first_busy_worker(outcome) -> None:
        if killed:
            return
        pid = outcome.pid
        children = [p.pid for p in psutil.Process(pid).children(recursive=True)]
        if not children:  # nothing in flight there: wait for a busier moment
            return
        killed.update(pid=pid, worker=outcome.worker, children=children)
        os.kill(pid, signal.SIGKILL)

    summary = solve_tasks_ray(tasks, f"replay:{replay}", CONFIG, out, workers=2, progress=False,
                              on_outcome=kill_first_busy_worker)
    assert killed, "no worker had a tree in flight when a tree finished"
    assert summary.done == N_TASKS and summary.gave_up == 0
    assert summary.worker_deaths == {DeathCause.KILLED.value: 1}
    _check_trees(out, tasks)
    died = [r for r in Manifest(out).read() if r.status is TaskStatus.WORKER_DIED]
    assert died and summary.retries == len(died)
    assert {r.worker for r in died} == {killed["worker"]} and {r.cause for r in died} == {DeathCause.KILLED}
    for record in died:  # the retry went to another worker, as attempt 2
        retry = next(r for r in Manifest(out).read() if r.task_id == record.task_id and r.status is TaskStatus.OK)
        assert retry.attempt == 2 and retry.worker != killed["worker"]
    deadline = time.monotonic() + 15
    while _alive(killed["children"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(killed["children"]) == [], "sandbox processes outlived their killed worker"


def test_a_killed_workers_trees_continue_from_their_checkpoints_on_another_worker(ray_local, tmp_path):
    """Slow cells keep the trees in flight when the first tree finishes; the worker holding the others is killed
    and the retries, on a new worker, continue the trees it checkpointed instead of starting them over."""
    folder = tmp_path / "tasks"
    tasks = load_tasks(write_tasks(folder, n=4))
    replay = write_replay(folder, n=4, cell_seconds=0.5)
    out = tmp_path / "collect"
    killed: dict[str, object] = {}
    resumes: dict[str, int] = {}

    def kill_the_busy_worker(outcome) -> None:
        resumes[outcome.task_id] = outcome.stats.resumes
        if killed or not list((out / "checkpoints").glob("*.json")):
            return
        killed.update(worker=outcome.worker)
        os.kill(outcome.pid, signal.SIGKILL)

    summary = solve_tasks_ray(tasks, f"replay:{replay}", CONFIG, out, workers=1, progress=False,
                              on_outcome=kill_the_busy_worker, checkpoint_every_s=0)
    assert killed and summary.done == 4 and summary.gave_up == 0
    retried = {r.task_id for r in Manifest(out).read() if r.status is TaskStatus.WORKER_DIED}
    assert retried and all(resumes[t] == 1 for t in retried)
    assert all(resumes[t] == 0 for t in resumes if t not in retried)
    assert not (out / "checkpoints").exists()  # each finished tree's checkpoint went, and the folder with them
    _check_trees(out, tasks)


def test_raising_worker_is_reused_and_a_hopeless_task_gives_up(ray_local, task_files, tmp_path):
    """The machinery with a trivial injected solve function: a worker that raises keeps serving, the task that
    always fails is retried max_retries times and then recorded as given up."""
    tasks = load_tasks(task_files[0])[:4]
    out = tmp_path / "collect"

    def solve_fn(stream, context):  # a closure: Ray pickles it by value into the worker
        from types import SimpleNamespace

        from search.tree import Tree

        for task in stream:
            if task.id == "T2":
                raise RuntimeError(f"boom on {task.id}")
            yield SimpleNamespace(task_id=task.id, interrupted=False, tree=Tree(task),
                                  stats=SimpleNamespace(nodes=1, wall_seconds=0.0), answer=None, correct=None,
                                  error=None)

    summary = solve_tasks_ray(tasks, f"replay:{task_files[1]}", CONFIG, out, workers=1, progress=False,
                              solve_fn=solve_fn, max_retries=2)
    records = Manifest(out).read()
    t2 = [r for r in records if r.task_id == "T2"]
    assert [(r.status, r.attempt, r.cause) for r in t2] == [
        (TaskStatus.WORKER_DIED, 1, DeathCause.ERROR), (TaskStatus.WORKER_DIED, 2, DeathCause.ERROR),
        (TaskStatus.GAVE_UP, 3, DeathCause.ERROR)]
    assert "boom on T2" in t2[-1].error
    assert summary.gave_up == 1 and summary.worker_deaths == {"error": 3}
    assert sorted(r.task_id for r in records if r.status is TaskStatus.OK) == ["T0", "T1", "T3"]
    assert {r.worker for r in records} == {"w0"}  # the raising worker was reused, never replaced


def test_a_worker_that_never_asks_for_a_task_is_replaced_instead_of_awaited(ray_local, task_files, tmp_path,
                                                                            monkeypatch):
    """A started worker whose run call never reaches the queue (seen under load: Ray left a replacement idle and
    the driver waited for ever) is replaced after ``FIRST_TAKE_S``; its replacement delivers every tree."""
    import search.ray_driver as ray_driver

    monkeypatch.setattr(ray_driver, "FIRST_TAKE_S", 3.0)
    tasks = load_tasks(task_files[0])[:3]
    out = tmp_path / "collect"

    def solve_fn(stream, context):
        import time as clock
        from types import SimpleNamespace

        from search.tree import Tree

        if context.worker == "w0":  # the stuck one: holds its call and never pulls
            clock.sleep(600)
        for task in stream:
            yield SimpleNamespace(task_id=task.id, interrupted=False, tree=Tree(task),
                                  stats=SimpleNamespace(nodes=1, wall_seconds=0.0), answer=None, correct=None,
                                  error=None)

    started = time.monotonic()
    summary = solve_tasks_ray(tasks, f"replay:{task_files[1]}", CONFIG, out, workers=1, progress=False,
                              solve_fn=solve_fn)
    assert time.monotonic() - started < 120
    records = Manifest(out).read()
    assert sorted(r.task_id for r in records if r.status is TaskStatus.OK) == ["T0", "T1", "T2"]
    assert {r.worker for r in records} == {"w1"} and summary.retries == 0  # w0 took nothing: nothing to retry
    assert summary.worker_deaths == {DeathCause.UNKNOWN.value: 1}
