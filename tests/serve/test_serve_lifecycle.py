"""Job life cycle against a real server: cancel, queue limits, kill -9 and restart, shutdown, garbage collection."""

from __future__ import annotations

import json
import sqlite3
import time

from serve_helpers import SIMPLE_TASK, sleepy_replay

LONG = {"iterations": 400, "expansions": 2}  # about 400 sleeping cells: far longer than any test waits


def _running(job: dict) -> bool:
    return job["status"] == "running" and job["progress"]["iterations"] >= 2


def test_cancel_running_and_queued_jobs_and_queue_limit(start_server, tmp_path):
    script = sleepy_replay(tmp_path / "sleepy.json", seconds=0.3)
    server = start_server("--llm", f"replay:{script}", "--max-trees", "1", "--max-queue", "1", name="cancel")
    running = server.submit(task=SIMPLE_TASK, files=[], settings=LONG).json()["id"]
    server.wait(running, until=_running)
    time.sleep(1.2)  # partial files are rewritten at most once a second
    tree = server.get(f"/v1/tasks/{running}/tree.json")
    assert tree.status_code == 200 and len(tree.json()) >= 3, "the partial tree is downloadable while running"
    assert server.get(f"/v1/tasks/{running}/tree.html").status_code == 200
    assert server.get(f"/v1/tasks/{running}/solution.ipynb").status_code == 404  # only at the end
    metrics = server.get("/metrics").text
    assert "jupiter_running_trees 1" in metrics
    states = [line for line in metrics.splitlines() if line.startswith("jupiter_sandbox_states ")]
    assert float(states[0].split()[1]) >= 1  # prometheus_client writes every value as a float ("3.0")
    queued = server.submit(task=SIMPLE_TASK, files=[], settings=LONG).json()["id"]
    assert server.get(f"/v1/tasks/{queued}").json()["status"] == "queued"
    full = server.submit(task=SIMPLE_TASK, files=[], settings=LONG)
    assert full.status_code == 429 and "queue full" in full.json()["error"]

    gone = server.delete(f"/v1/tasks/{queued}")
    assert gone.status_code == 200 and gone.json()["status"] == "cancelled"
    assert list(server.events(queued))[-1] == ("done", {"status": "cancelled", "answer": None, "error": None})

    # a client joining mid-run: the nodes so far (root first), then live ones; cancel while it listens
    seen: list[tuple[str, dict]] = []
    before = server.get(f"/v1/tasks/{running}").json()["progress"]["nodes"]
    for kind, data in server.events(running):
        seen.append((kind, data))
        live_nodes = sum(1 for k, _ in seen if k == "node") - before
        if kind == "iteration" and live_nodes >= 2 and not any(k == "cancelling" for k, _ in seen):
            seen.append(("cancelling", {}))
            stopped = server.delete(f"/v1/tasks/{running}")
            assert stopped.status_code == 200
    tags = [d["tag"] for k, d in seen if k == "node"]
    assert tags[0] == "0" and len(tags) == len(set(tags)), "every node once, root first"
    assert seen[-1] == ("done", {"status": "cancelled", "answer": seen[-1][1]["answer"], "error": None})
    job = server.wait(running)
    assert len(tags) == job["progress"]["nodes"]
    assert job["status"] == "cancelled"
    assert job["result"]["interrupted"] is True
    assert job["progress"]["iterations"] < LONG["iterations"]
    tree = server.get(f"/v1/tasks/{running}/tree.json")
    assert tree.status_code == 200 and len(tree.json()) == job["progress"]["nodes"] >= 3, "partial tree kept"
    assert server.get(f"/v1/tasks/{running}/solution.ipynb").status_code == 200
    events = list(server.events(running))
    assert events[-1][1]["status"] == "cancelled"
    health = server.get("/healthz").json()
    assert health["running"] == 0 and health["queued"] == 0
    # the cancelled tree's sandbox is closed: no live notebook state is left behind
    deadline, states = time.monotonic() + 10, None
    while time.monotonic() < deadline:
        metrics = server.get("/metrics").text
        states = float(next(line for line in metrics.splitlines()
                          if line.startswith("jupiter_sandbox_states ")).split()[1])
        if states == 0:
            break
        time.sleep(0.2)
    assert states == 0


def test_kill_9_mid_search_then_restart_finishes_the_job(start_server, tmp_path):
    script = sleepy_replay(tmp_path / "sleepy.json", seconds=1.0)  # the tree outlives its 5-second checkpoint
    db, data_root = tmp_path / "jobs.sqlite", tmp_path / "jobs"
    flags = ("--llm", f"replay:{script}", "--max-trees", "2")
    first = start_server(*flags, db=db, data_root=data_root, name="crash")
    settings = {"iterations": 10, "expansions": 2}  # depth 10 ends the chain of cells at 11
    job_id = first.submit(task=SIMPLE_TASK, files=[], settings=settings).json()["id"]
    waiting = first.submit(task=SIMPLE_TASK, files=[], settings={"iterations": 3, "expansions": 2, "seed": 1})
    waiting_id = waiting.json()["id"]
    first.wait(job_id, until=_running)
    checkpoint = data_root / job_id / "checkpoints" / f"{job_id}.json"
    deadline = time.monotonic() + 60
    while not checkpoint.is_file() or json.loads(checkpoint.read_text())["stats"]["iterations"] < 2:
        assert time.monotonic() < deadline, "no checkpoint of the running tree"
        time.sleep(0.05)
    first.kill9()
    saved = json.loads(checkpoint.read_text())

    with sqlite3.connect(db) as conn:  # what the crash left behind
        rows = dict(conn.execute("SELECT id, status FROM jobs").fetchall())
    assert rows[job_id] == "running"

    second = start_server(*flags, db=db, data_root=data_root, name="restart")
    job = second.wait(job_id)
    assert job["status"] == "done", job
    assert job["result"]["answer"] == "@x[1]"
    assert job["attempts"] == 2, "re-queued once, run again"
    assert job["progress"]["iterations"] == settings["iterations"]
    # ... continuing the tree the crash interrupted, not starting it over
    assert job["result"]["stats"]["resumes"] == 1
    tree = {n["tag"]: n for n in json.loads((data_root / job_id / "output" / "tree.json").read_text())}
    assert all(tree[n["tag"]]["code"] == n["code"] for n in saved["tree"]["nodes"])
    assert not checkpoint.exists()
    assert second.wait(waiting_id)["status"] == "done"
    listed = second.get("/v1/tasks").json()["tasks"]
    assert sorted(t["id"] for t in listed) == sorted([job_id, waiting_id]), "no job lost or duplicated"
    tags = [d["tag"] for k, d in second.events(job_id) if k == "node"]
    assert len(tags) == len(set(tags)) == job["progress"]["nodes"]


def test_shutdown_requeues_running_jobs(start_server, tmp_path):
    script = sleepy_replay(tmp_path / "sleepy.json", seconds=0.3)
    db, data_root = tmp_path / "jobs.sqlite", tmp_path / "jobs"
    flags = ("--llm", f"replay:{script}")
    first = start_server(*flags, db=db, data_root=data_root, name="graceful")
    job_id = first.submit(task=SIMPLE_TASK, files=[], settings={"iterations": 10, "expansions": 2}).json()["id"]
    first.wait(job_id, until=_running)
    first.stop()  # SIGTERM: the tree stops at its next step and the job goes back to the queue
    assert first.process.returncode in (0, -15)  # uvicorn re-raises SIGTERM after its graceful shutdown
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM jobs WHERE id=?", (job_id,)).fetchone()[0] == "queued"
    saved = json.loads((data_root / job_id / "checkpoints" / f"{job_id}.json").read_text())  # the whole tree
    second = start_server(*flags, db=db, data_root=data_root, name="graceful2")
    job = second.wait(job_id)
    assert job["status"] == "done" and job["progress"]["iterations"] == 10
    assert job["result"]["stats"]["resumes"] == 1 and job["result"]["stats"]["iterations"] == 10
    assert job["result"]["stats"]["model_calls"] > saved["stats"]["model_calls"]


def test_gc_days_removes_old_jobs_and_their_files(start_server, tmp_path):
    script = sleepy_replay(tmp_path / "sleepy.json", seconds=0.0)
    db, data_root = tmp_path / "jobs.sqlite", tmp_path / "jobs"
    first = start_server("--llm", f"replay:{script}", db=db, data_root=data_root, name="gc")
    old = first.submit(task=SIMPLE_TASK, files=[], settings={"iterations": 1}).json()["id"]
    new = first.submit(task=SIMPLE_TASK, files=[], settings={"iterations": 1}).json()["id"]
    first.wait(old), first.wait(new)
    first.stop()
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE jobs SET finished=? WHERE id=?", (time.time() - 3 * 86400, old))
    assert (data_root / old / "output" / "result.json").is_file()
    second = start_server("--llm", f"replay:{script}", "--gc-days", "2", db=db, data_root=data_root, name="gc2")
    assert second.get(f"/v1/tasks/{old}").status_code == 404
    assert not (data_root / old).exists()
    assert second.get(f"/v1/tasks/{new}").json()["status"] == "done"
    assert (data_root / new / "output" / "result.json").is_file()
