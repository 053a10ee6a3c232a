"""The server's parts on their own: store, submission checks, events hub, metrics text, and the scheduler
driving real sandboxes with a recording replay policy (trees of different jobs share a model call)."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from pathlib import Path

import pytest
from serve_helpers import SIMPLE_TASK, sleepy_replay

from jupiter.serve.config import ServeConfig, ServeConfigError, is_loopback
from jupiter.serve.events import Event, EventHub, EventType
from jupiter.serve.jobs import (
    SubmissionError,
    as_job_task,
    check_file_name,
    job_paths,
    load_job_task,
    parse_settings,
    search_config,
)
from jupiter.serve.metrics import MetricsSnapshot, RateMeter, render_metrics
from jupiter.serve.store import JobStatus, JobStore


def test_store_round_trip_requeue_and_gc(tmp_path):
    store = JobStore(tmp_path / "db.sqlite")
    assert store.path.exists()
    a = store.insert("a" * 32, "t1", "q1", {"iterations": 3})
    store.insert("b" * 32, "t2", "q2", {})
    assert a.status is JobStatus.QUEUED and a.progress["nodes"] == 0
    assert a == store.get(a.id), "the record insert returns is the row as stored"
    assert store.count(JobStatus.QUEUED) == 2 and store.count(JobStatus.RUNNING) == 0
    assert store.mark_running(a.id) and not store.mark_running(a.id)
    store.update_progress(a.id, {"iterations": 1, "nodes": 3, "tokens": 9, "answers": 0}, {"nodes": [{"tag": "0"}]})
    assert store.get(a.id, with_tree=True).tree == {"nodes": [{"tag": "0"}]}
    assert store.requeue_running() == [a.id]
    again = store.get(a.id, with_tree=True)
    assert again.status is JobStatus.QUEUED and again.tree is None and again.attempts == 1
    assert store.cancel_queued("b" * 32) and not store.cancel_queued("b" * 32)
    store.mark_running(a.id)
    store.finish(a.id, JobStatus.DONE, {"answer": "@x[1]"}, None, None)
    with pytest.raises(ValueError):
        store.finish(a.id, JobStatus.RUNNING, None, None, None)
    counts = store.counts()
    assert counts[JobStatus.DONE] == 1 and counts[JobStatus.CANCELLED] == 1 and counts[JobStatus.QUEUED] == 0
    assert all(store.count(status) == n for status, n in counts.items())
    assert [r.id for r in store.list()] == ["b" * 32, a.id], "newest first"
    assert sorted(store.finished_before(time.time() + 1)) == sorted([a.id, "b" * 32])
    assert store.finished_before(time.time() - 60) == []
    store.close()
    reopened = JobStore(tmp_path / "db.sqlite")  # durable across processes
    assert reopened.get(a.id).result == {"answer": "@x[1]"}
    assert reopened.get(a.id).to_json()["status"] == "done"


def test_file_names_and_settings():
    assert check_file_name("data.csv") == "data.csv"
    for bad in ("", "../x", "a/b", "a\\b", ".env", "a..b", "x\x00y", "x\ny", "y" * 300):
        with pytest.raises(SubmissionError):
            check_file_name(bad)
    assert parse_settings(None) == {} and parse_settings("") == {}
    assert parse_settings('{"iterations": 3, "c_puct": 1, "seed": null}') == {"iterations": 3, "c_puct": 1}
    for text, words in (('{"x": 1}', "unknown setting"), ('{"iterations": true}', "settings.iterations"),
                        ("[]", "JSON object"), ("{", "not valid JSON")):
        with pytest.raises(SubmissionError, match=words):
            parse_settings(text)
    config = search_config({"iterations": 7, "decision": "value"}, "paper", 4, 30.0)
    assert config.iterations == 7 and config.max_trees_in_flight == 4 and config.cell_timeout == 30.0
    assert config.decision.value == "value"
    with pytest.raises(SubmissionError, match="settings.decision"):
        search_config({"decision": "coin"}, "paper", 4, None)
    with pytest.raises(SubmissionError, match="temperature"):
        search_config({"temperature": -1}, "paper", 4, None)
    with pytest.raises(SubmissionError) as caught:
        job_paths(Path("/tmp"), "../../etc")
    assert caught.value.status == 404


def test_job_task_files_must_be_uploaded(tmp_path):
    paths = job_paths(tmp_path, "c" * 32)
    paths.files.mkdir(parents=True)
    (paths.files / "data.csv").write_text("a\n1\n")
    paths.task.write_text(json.dumps(dict(SIMPLE_TASK, files=["sub/data.csv"])))
    task = load_job_task(paths)
    assert task.files == ((paths.files / "data.csv").resolve(),)
    (paths.files / "notes.txt").write_text("extra")
    assert load_job_task(paths).files == ((paths.files / "data.csv").resolve(), (paths.files / "notes.txt").resolve())
    renamed = as_job_task(task, "c" * 32)
    assert renamed.id == "c" * 32 and renamed.metadata["task_id"] == "tick-task"
    paths.task.write_text(json.dumps(dict(SIMPLE_TASK, files=["data.csv", "missing.csv", "/etc/hostname"])))
    with pytest.raises(SubmissionError, match="missing.csv, hostname"):
        load_job_task(paths)
    paths.task.write_text(json.dumps({"id": "x"}))
    with pytest.raises(SubmissionError, match="question"):
        load_job_task(paths)
    paths.task.write_text("{")
    with pytest.raises(SubmissionError, match="task: not valid JSON"):
        load_job_task(paths)


def test_job_task_from_the_submitted_record_and_what_counts_as_uploaded(tmp_path):
    """A submit hands the parsed task over (task.json is not read back); a task may name its files by the job
    folder's absolute path too, but never a link placed in files/ nor a file beside it."""
    paths = job_paths(tmp_path, "d" * 32)
    paths.files.mkdir(parents=True)
    (paths.files / "data.csv").write_text("a\n1\n")
    record = dict(SIMPLE_TASK, files=["data.csv"])
    task = load_job_task(paths, record)  # no task.json written at all
    assert task.files == ((paths.files / "data.csv").resolve(),) and task.question == SIMPLE_TASK["question"]
    absolute = load_job_task(paths, dict(SIMPLE_TASK, files=[str(paths.files / "data.csv")]))
    assert absolute.files == task.files
    (tmp_path / "secret.csv").write_text("s\n")
    (paths.files / "link.csv").symlink_to(tmp_path / "secret.csv")
    (paths.root / "beside.csv").write_text("b\n")
    for name in ("link.csv", "beside.csv", str(paths.files / ".." / "beside.csv"), str(tmp_path / "secret.csv")):
        with pytest.raises(SubmissionError, match="not uploaded"):
            load_job_task(paths, dict(SIMPLE_TASK, files=["data.csv", name]))
    assert load_job_task(paths, record).files == task.files, "a link in files/ is not an extra upload either"


def test_config_needs_a_token_off_loopback(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.org")
    with pytest.raises(ServeConfigError, match="token is required"):
        ServeConfig(host="0.0.0.0", db=tmp_path / "db")
    with pytest.raises(ServeConfigError, match="token"):
        ServeConfig(token="short", db=tmp_path / "db")
    config = ServeConfig(host="0.0.0.0", token="long-enough-token", db=tmp_path / "db")
    assert config.data_root == tmp_path / "jobs"


def test_hub_gives_late_subscribers_every_node_once():
    async def scenario() -> list[Event]:
        hub = EventHub()
        loop = asyncio.get_running_loop()
        hub.open("j")
        hub.publish("j", EventType.NODE, {"tag": "0"})
        hub.publish("j", EventType.NODE, {"tag": "0.1"})
        sub = hub.subscribe("j", loop)
        assert [n["tag"] for n in sub.nodes] == ["0", "0.1"] and sub.done is None

        def later() -> None:  # the driver thread
            hub.publish_many("j", [Event(EventType.NODE, {"tag": "0.2"}),
                                   Event(EventType.ITERATION, {"iterations": 1}),
                                   Event(EventType.DONE, {"status": "done"})])

        threading.Thread(target=later).start()
        got = [await asyncio.wait_for(sub.queue.get(), 5) for _ in range(3)]
        finished = hub.subscribe("j", loop)
        assert finished.queue is None and finished.done.data == {"status": "done"}
        assert [n["tag"] for n in finished.nodes] == ["0", "0.1", "0.2"]
        return got

    got = asyncio.run(scenario())
    assert [e.type for e in got] == [EventType.NODE, EventType.ITERATION, EventType.DONE]


def test_metrics_render_and_rates():
    meter = RateMeter(window_s=60)
    meter.add(nodes=6, tokens=100)
    nodes, tokens = meter.rates()
    assert nodes > 0 and tokens > nodes
    text = render_metrics(MetricsSnapshot(2, 1, {"done": 3, "queued": 2}, 1.5, 20.0, None, 4, {"job": 1}))
    assert text.endswith("\n")
    from prometheus_client.parser import text_string_to_metric_families

    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("jupiter_queue_length", ())] == 2 and samples[("jupiter_running_trees", ())] == 1
    assert samples[("jupiter_jobs_total", (("status", "done"),))] == 3
    assert samples[("jupiter_jobs_total", (("status", "queued"),))] == 2
    assert samples[("jupiter_nodes_per_second", ())] == 1.5 and samples[("jupiter_sandbox_states", ())] == 4
    assert samples[("jupiter_failures_total", (("type", "job"),))] == 1
    assert math.isnan(samples[("jupiter_prefix_cache_hit_rate", ())])


class _Recording:
    """A replay policy that records how many histories (and of which tasks) each call carried."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    def generate(self, histories, params):
        self.calls.append(len(histories))
        return self.inner.generate(histories, params)


def test_trees_of_different_jobs_share_a_model_call(tmp_path):
    from jupiter.llm import load_replay
    from jupiter.serve.jobs import JobSpec
    from jupiter.serve.scheduler import Scheduler
    from sandbox import Sandbox, SandboxConfig

    policy = _Recording(load_replay(sleepy_replay(tmp_path / "s.json", seconds=0.2)))
    store, hub = JobStore(tmp_path / "db.sqlite"), EventHub()
    scheduler = Scheduler(store, hub, policy, lambda: Sandbox(SandboxConfig()), max_trees=4)
    ids, budgets = [], [4, 2, 3]  # the first two share a lane though their budgets differ
    for n in range(3):
        settings = {"iterations": budgets[n], "expansions": 2}
        config = search_config(settings, "paper", 4, None)
        job_id = f"{n:032x}"
        paths = job_paths(tmp_path / "jobs", job_id)
        paths.files.mkdir(parents=True)
        paths.task.write_text(json.dumps(SIMPLE_TASK))
        task = load_job_task(paths)
        store.insert(job_id, task.id, task.question, settings)
        seed = 0 if n < 2 else 5  # the third job has other settings: a lane of its own
        scheduler.submit(JobSpec(job_id, as_job_task(task, job_id), task.id, config, seed, paths))
        ids.append(job_id)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not all(store.get(i).status.finished for i in ids):
        time.sleep(0.2)
    scheduler.shutdown()
    records = [store.get(i) for i in ids]
    assert [r.status for r in records] == [JobStatus.DONE] * 3, [r.error for r in records]
    assert all(r.result["answer"] == "@x[1]" and r.result["task_id"] == "tick-task" for r in records)
    assert max(policy.calls) >= 2, f"no call carried two jobs' trees: {policy.calls}"
    assert sum(policy.calls) == sum(r.progress["iterations"] for r in records)
    assert [r.result["iterations"] for r in records] == budgets, "each job ran its own budget"
    assert [r.result["config"]["iterations"] for r in records] == budgets
    assert not any(r.result["interrupted"] for r in records)
    assert not any(n.startswith("stopped early") for r in records for n in r.result["notes"])
    tree = json.loads((job_paths(tmp_path / "jobs", ids[0]).output / "tree.json").read_text())
    assert tree[0]["task"]["id"] == "tick-task", "files show the user's task id"


class _Broken:
    """A policy whose server is down for the first call, then fine."""

    def __init__(self, inner):
        self.inner, self.failed = inner, False

    def generate(self, histories, params):
        if not self.failed:
            self.failed = True
            raise ConnectionError("model server down")
        return self.inner.generate(histories, params)


def test_a_failing_policy_fails_the_jobs_in_flight_keeping_their_trees_and_the_server_goes_on(tmp_path):
    from jupiter.llm import load_replay
    from jupiter.serve.jobs import JobSpec
    from jupiter.serve.scheduler import Scheduler
    from sandbox import Sandbox, SandboxConfig

    policy = _Broken(load_replay(sleepy_replay(tmp_path / "s.json", seconds=0.0)))
    store, hub = JobStore(tmp_path / "db.sqlite"), EventHub()
    scheduler = Scheduler(store, hub, policy, lambda: Sandbox(SandboxConfig()), max_trees=4)
    config = search_config({"iterations": 2}, "paper", 4, None)

    def submit(n: int) -> str:
        job_id = f"{n:032x}"
        paths = job_paths(tmp_path / "jobs", job_id)
        paths.files.mkdir(parents=True)
        paths.task.write_text(json.dumps(SIMPLE_TASK))
        task = load_job_task(paths)
        store.insert(job_id, task.id, task.question, {})
        scheduler.submit(JobSpec(job_id, as_job_task(task, job_id), task.id, config, 0, paths))
        return job_id

    def wait(job_id: str):
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not store.get(job_id).status.finished:
            time.sleep(0.1)
        return store.get(job_id)

    first = wait(submit(1))
    assert first.status is JobStatus.FAILED and "model server down" in first.error
    from search import load_tree

    kept = load_tree(job_paths(tmp_path / "jobs", f"{1:032x}").output / "tree.json")
    assert kept.task.question == SIMPLE_TASK["question"] and kept.root is not None  # its tree is written, not lost
    assert scheduler.failures["driver"] == 1 and scheduler.failures["job"] == 1
    second = wait(submit(2))
    scheduler.shutdown()
    assert second.status is JobStatus.DONE and second.result["answer"] == "@x[1]"


def test_token_file_is_read_and_checked(tmp_path):
    import argparse

    from jupiter.commands.serve import _token
    from jupiter.task import TaskError

    path = tmp_path / "token"
    path.write_text("  a-long-secret-token \nignored\n")
    assert _token(argparse.Namespace(token=None, token_file=path)) == "a-long-secret-token"
    assert _token(argparse.Namespace(token="given-token-1", token_file=None)) == "given-token-1"
    path.write_text("\n")
    with pytest.raises(TaskError, match="empty"):
        _token(argparse.Namespace(token=None, token_file=path))
    with pytest.raises(TaskError, match="cannot read"):
        _token(argparse.Namespace(token=None, token_file=tmp_path / "missing"))


class _PrefersWaiting:
    """A scripted value model (the search's ``Value`` protocol): a state after a 'tick' is worth more."""

    def __init__(self) -> None:
        self.calls = 0

    def evaluate(self, histories):
        self.calls += 1
        return [0.8 if "tick" in str(h[-1].get("content", "")) else -0.2 for h in histories]


def test_a_value_model_scores_the_jobs_nodes_and_progress_is_in_the_database_while_it_runs(tmp_path):
    from jupiter.llm import load_replay
    from jupiter.serve.jobs import JobSpec
    from jupiter.serve.scheduler import Scheduler
    from sandbox import Sandbox, SandboxConfig

    value = _PrefersWaiting()
    store, hub = JobStore(tmp_path / "db.sqlite"), EventHub()
    scheduler = Scheduler(store, hub, load_replay(sleepy_replay(tmp_path / "s.json", seconds=0.3)),
                          lambda: Sandbox(SandboxConfig()), max_trees=2, value=value)
    settings = {"iterations": 6, "expansions": 2}
    job_id = "f" * 32
    paths = job_paths(tmp_path / "jobs", job_id)
    paths.files.mkdir(parents=True)
    paths.task.write_text(json.dumps(SIMPLE_TASK))
    task = load_job_task(paths)
    store.insert(job_id, task.id, task.question, settings)
    scheduler.submit(JobSpec(job_id, as_job_task(task, job_id), task.id, search_config(settings, "paper", 2, None),
                             0, paths))
    seen_running: list[int] = []  # nodes the database shows while the job runs: written as the tree grows
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not store.get(job_id).status.finished:
        record = store.get(job_id)
        if record.status is JobStatus.RUNNING:
            seen_running.append(int(record.progress["nodes"]))
        time.sleep(0.1)
    scheduler.shutdown()
    record = store.get(job_id)
    assert record.status is JobStatus.DONE, record.error
    assert len(set(n for n in seen_running if n > 0)) >= 2, f"progress was not written during the run: {seen_running}"
    result = record.result
    assert value.calls > 0
    assert result["value_answer"] == "@x[1]" and result["answer"] == "@x[1]"
    assert result["decided_by"] == "vote" and result["vote_table"][0]["count"] >= 2
    assert result["vote_table"][0]["mean_value"] != 0.0  # the answers' values come from the value model
    assert result["stats"]["value_calls"] > 0


@pytest.mark.parametrize("driver", ["thread", "process"])
def test_the_trees_sandboxes_run_at_the_servers_niceness(tmp_path, driver):
    """Each sandbox is a session of its own, which the kernel may schedule as one group: the niceness must reach
    the sandbox itself (a niced driver process alone does not lower its sandboxes' share)."""
    from jupiter.serve.scheduler import Scheduler

    config = ServeConfig(db=tmp_path / "jobs.sqlite", driver=driver, nice=9, cell_timeout=30)
    scheduler = Scheduler.for_server(config, JobStore(config.db), EventHub(), policy=None, value=None)
    assert scheduler.sandbox_config.nice == 9 and scheduler.sandbox_config.timeout_s == 30
    level = Scheduler.for_server(ServeConfig(db=tmp_path / "jobs.sqlite", nice=0), JobStore(config.db), EventHub(),
                                 policy=None, value=None)
    assert level.sandbox_config.nice == 0


def test_the_server_imports_what_the_first_job_needs_before_it_serves(tmp_path):
    """Imported on the first submit and the first tree instead, the search and the output writers held the GIL
    for the first requests of a burst. A fresh interpreter: before start-up the notebook writers are not imported,
    once the server serves all are, and start-up's objects are frozen out of the collector's way until it stops."""
    import subprocess
    import sys

    from serve_helpers import TITANIC_REPLAY

    code = f"""
import asyncio, gc, json, sys
from jupiter.serve.app import create_app
from jupiter.serve.config import ServeConfig
from jupiter.serve.scheduler import LAZY_MODULES
before = [m for m in LAZY_MODULES if m in sys.modules]
app = create_app(ServeConfig(llm="replay:{TITANIC_REPLAY}", db={str(tmp_path / "jobs.sqlite")!r}, max_trees=1))
async def main():
    async with app.router.lifespan_context(app):
        serving = [m for m in LAZY_MODULES if m in sys.modules], gc.get_freeze_count()
    print(json.dumps({{"before": before, "serving": serving[0], "frozen": serving[1],
                      "frozen_after": gc.get_freeze_count(), "all": list(LAZY_MODULES)}}))
asyncio.run(main())
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "nbformat" not in seen["before"]  # the service imports the search with its job settings; not the rest
    assert seen["serving"] == seen["all"]
    assert seen["frozen"] > 10_000 and seen["frozen_after"] == 0


def test_jobs_of_one_task_and_seed_grow_the_same_tree(tmp_path):
    """The service names each job's task after the job; the tree's tie-breaks follow the task's own id and the
    seed, so resubmitting a task with its seed reproduces its tree (before, each job id broke ties its own way:
    3 of 8 identical jobs found another answer)."""
    from fastapi.testclient import TestClient
    from serve_helpers import TITANIC_DATA, TITANIC_REPLAY, TITANIC_TASK

    from jupiter.serve.app import create_app

    def signature(client: TestClient, job_id: str) -> list[tuple]:
        nodes = client.get(f"/v1/tasks/{job_id}/tree.json").json()
        return [(n["tag"], n["code"], n["final_answer"], n["visit_count"]) for n in nodes]

    config = ServeConfig(llm=f"replay:{TITANIC_REPLAY}", db=tmp_path / "jobs.sqlite", max_trees=4)
    with TestClient(create_app(config)) as client:
        ids = []
        for _ in range(4):
            parts = [("task", (None, TITANIC_TASK.read_text())),
                     ("files", (TITANIC_DATA.name, TITANIC_DATA.read_bytes())),
                     ("settings", (None, json.dumps({"iterations": 8, "expansions": 2, "seed": 3})))]
            response = client.post("/v1/tasks", files=parts)
            assert response.status_code == 202, response.text
            ids.append(response.json()["id"])
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            jobs = [client.get(f"/v1/tasks/{job_id}").json() for job_id in ids]
            if all(job["status"] == "done" for job in jobs):
                break
            assert not any(job["status"] == "failed" for job in jobs), jobs
            time.sleep(0.3)
        else:
            raise AssertionError(f"the jobs did not finish: {[job['status'] for job in jobs]}")
        trees = [signature(client, job_id) for job_id in ids]
    assert len(trees[0]) > 8
    assert all(tree == trees[0] for tree in trees[1:])
    assert len({job["result"]["answer"] for job in jobs}) == 1


def test_submits_that_arrive_together_are_registered_one_at_a_time_on_one_thread(tmp_path, monkeypatch):
    """Registration (job folder, task check, row, queue) is GIL-bound: concurrent submits are registered one after
    another, never overlapping, so they do not take GIL turns from the event loop; each is accepted once."""
    from fastapi.testclient import TestClient
    from serve_helpers import TITANIC_DATA, TITANIC_REPLAY, TITANIC_TASK

    import jupiter.serve.app as app_module

    spans: list[tuple[float, float]] = []
    register = app_module._register_job

    def slow_register(*args, **kwargs):
        started = time.monotonic()
        time.sleep(0.05)  # long enough that registrations on several threads would overlap
        try:
            return register(*args, **kwargs)
        finally:
            spans.append((started, time.monotonic()))

    monkeypatch.setattr(app_module, "_register_job", slow_register)
    config = ServeConfig(llm=f"replay:{TITANIC_REPLAY}", db=tmp_path / "jobs.sqlite", max_trees=1)
    accepted: list[str] = []
    with TestClient(app_module.create_app(config)) as client:
        def submit() -> None:
            parts = [("task", (None, TITANIC_TASK.read_text())),
                     ("files", (TITANIC_DATA.name, TITANIC_DATA.read_bytes())),
                     ("settings", (None, json.dumps({"iterations": 1, "expansions": 1})))]
            response = client.post("/v1/tasks", files=parts)
            assert response.status_code == 202, response.text
            accepted.append(response.json()["id"])

        threads = [threading.Thread(target=submit) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        listed = client.get("/v1/tasks", params={"limit": 10}).json()["tasks"]
    assert len(accepted) == 6 and len(spans) == 6
    spans.sort()
    assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:])), spans
    assert len({job["id"] for job in listed}) == 6
