"""The driver process of ``jupiter serve`` (``--driver process``): the trees run in a child process that loads
the policy, its events reach the server's hub, and nothing is lost when either process dies."""

from __future__ import annotations

import os
import signal
import sqlite3
import time

import psutil
import pytest
from fastapi.testclient import TestClient
from serve_helpers import SIMPLE_TASK, TITANIC_DATA, TITANIC_REPLAY, TITANIC_TASK, sleepy_replay

from jupiter.serve.app import create_app
from jupiter.serve.config import ServeConfig, ServeConfigError
from jupiter.serve.driver_process import DriverProcess, DriverStartError
from jupiter.serve.timing import server_ms


def _submit(client: TestClient, task: str | None = None, files: list[tuple[str, bytes]] | None = None,
            settings: str | None = None) -> str:
    parts = [("task", (None, task or TITANIC_TASK.read_text()))]
    for name, data in files if files is not None else [(TITANIC_DATA.name, TITANIC_DATA.read_bytes())]:
        parts.append(("files", (name, data)))
    if settings:
        parts.append(("settings", (None, settings)))
    response = client.post("/v1/tasks", files=parts)
    assert response.status_code == 202, response.text
    return response.json()["id"]


def _wait(client: TestClient, job_id: str, until, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    job: dict = {}
    while time.monotonic() < deadline:
        job = client.get(f"/v1/tasks/{job_id}").json()
        if until(job):
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} never got there: {job}")


def _children(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=False)


def test_the_app_starts_a_driver_process_that_runs_jobs_and_streams_their_nodes(tmp_path):
    config = ServeConfig(llm=f"replay:{TITANIC_REPLAY}", db=tmp_path / "jobs.sqlite", max_trees=2, driver="process")
    with TestClient(create_app(config)) as client:
        driver = client.app.state.server.driver
        assert isinstance(driver, DriverProcess) and driver.pid != os.getpid()
        # the kernel caps niceness at 19, whatever the test run's own niceness
        assert psutil.Process(driver.pid).nice() == min(19, psutil.Process().nice() + config.nice)
        job_id = _submit(client, settings='{"iterations": 3, "expansions": 2}')
        job = _wait(client, job_id, lambda j: j["status"] == "done")
        assert job["result"]["answer"].startswith("@mean_fare[")
        assert job["progress"]["nodes"] >= 3
        # the child's node events reached this process's hub: a late stream replays them
        with client.stream("GET", f"/v1/tasks/{job_id}/events") as stream:
            text = "".join(stream.iter_text())
        assert text.count("event: node") == job["progress"]["nodes"]
        assert "event: done" in text
        # the child's counters reach /metrics
        time.sleep(1.0)
        metrics = client.get("/metrics").text
        assert 'jupiter_failures_total{type="driver"} 0' in metrics
        timing = server_ms(client.get("/healthz").headers.get("server-timing"))
        assert timing is not None and timing >= 0
    assert not psutil.pid_exists(driver.pid) or psutil.Process(driver.pid).status() == psutil.STATUS_ZOMBIE


def test_a_killed_driver_is_replaced_and_its_running_job_runs_again(tmp_path):
    script = sleepy_replay(tmp_path / "sleepy.json", seconds=0.3)
    config = ServeConfig(llm=f"replay:{script}", db=tmp_path / "jobs.sqlite", max_trees=2, driver="process")
    with TestClient(create_app(config)) as client:
        driver = client.app.state.server.driver
        first_pid = driver.pid
        import json

        job_id = _submit(client, task=json.dumps(SIMPLE_TASK), files=[],
                         settings='{"iterations": 6, "expansions": 2}')
        _wait(client, job_id, lambda j: j["status"] == "running" and j["progress"]["iterations"] >= 1)
        assert client.get("/healthz").json()["driver"] == "process"
        os.kill(first_pid, signal.SIGKILL)
        job = _wait(client, job_id, lambda j: j["status"] in ("done", "failed", "cancelled"), timeout=180)
        assert job["status"] == "done" and job["result"]["answer"] == "@x[1]"
        assert driver.pid != first_pid and driver.restarts == 1
        assert job["attempts"] == 2  # re-queued from the lost driver, run once more to completion
        time.sleep(1.0)
        assert 'jupiter_failures_total{type="driver"} 1' in client.get("/metrics").text
        assert client.get("/healthz").json()["driver"] == "process"


def test_healthz_is_503_while_a_lost_driver_cannot_be_replaced(tmp_path):
    """The child dies and its policy file has gone meanwhile: the server stays up, says why, and is 503."""
    replay = tmp_path / "replay.json"
    replay.write_bytes(TITANIC_REPLAY.read_bytes())
    config = ServeConfig(llm=f"replay:{replay}", db=tmp_path / "jobs.sqlite", driver="process")
    with TestClient(create_app(config)) as client:
        assert client.get("/healthz").json()["driver"] == "process"
        replay.unlink()
        os.kill(client.app.state.server.driver.pid, signal.SIGKILL)
        deadline, health = time.monotonic() + 60, None
        while time.monotonic() < deadline:
            health = client.get("/healthz")
            if health.status_code == 503 and "replay" in health.json()["error"]:
                break
            time.sleep(0.2)
        assert health is not None and health.status_code == 503, health.json() if health else None
        assert health.json()["status"] == "degraded" and health.json()["driver"] == "down"
        assert str(replay) in health.json()["error"]


@pytest.mark.parametrize("spec, what", [("replay:/nonexistent/replay.json", "--llm"), ("nonsense-spec", "--llm")])
def test_a_policy_the_driver_cannot_load_is_a_clear_start_error(tmp_path, spec, what):
    with pytest.raises(DriverStartError) as caught:
        DriverProcess(ServeConfig(llm=spec, db=tmp_path / "jobs.sqlite")).start()
    assert str(caught.value).startswith(f"{what}: ") and len(caught.value.message) > 10


def test_config_names_a_bad_driver_setting():
    with pytest.raises(ServeConfigError, match="driver: must be 'process' or 'thread'"):
        ServeConfig(driver="fork")
    with pytest.raises(ServeConfigError, match="ServeConfig.nice: must be greater than or equal to 0"):
        ServeConfig(nice=-5)


def test_server_timing_header_parsing():
    assert server_ms("app;dur=12.5") == 12.5
    assert server_ms("db;dur=1, app;dur=3") == 3.0
    assert server_ms("app;desc=x") is None and server_ms(None) is None and server_ms("app;dur=x") is None


def test_a_server_killed_by_sigkill_leaves_no_driver_and_no_lost_job(start_server, tmp_path):
    """Only the server's own process dies: its driver sees the pipe close, stops the tree and puts the job back
    in the queue; a new server on the same database finishes it."""
    import json

    script = sleepy_replay(tmp_path / "sleepy.json", seconds=0.3)
    first = start_server("--llm", f"replay:{script}", "--driver", "process", name="first")
    job_id = first.submit(task=SIMPLE_TASK, files=[], settings={"iterations": 8, "expansions": 2}).json()["id"]
    first.wait(job_id, until=lambda j: j["status"] == "running" and j["progress"]["iterations"] >= 1)
    drivers = [p for p in _children(first.process.pid) if "spawn_main" in " ".join(p.cmdline())]
    assert len(drivers) == 1, [p.cmdline() for p in _children(first.process.pid)]
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait(10)
    _gone, alive = psutil.wait_procs(drivers, timeout=60)
    assert not alive, "the driver outlived its server"
    with sqlite3.connect(first.db) as db:
        status = db.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()[0]
    assert status == "queued"
    second = start_server("--llm", f"replay:{script}", "--driver", "process", db=first.db, data_root=first.data_root,
                          name="second")
    job = second.wait(job_id, timeout=120)
    assert job["status"] == "done" and json.dumps(job["result"]["answer"]) == '"@x[1]"'


@pytest.mark.slow  # the child imports torch to read the folder
def test_a_value_model_the_driver_cannot_load_names_the_flag(tmp_path):
    empty = tmp_path / "not-a-model"
    empty.mkdir()
    config = ServeConfig(llm=f"replay:{TITANIC_REPLAY}", db=tmp_path / "jobs.sqlite", value_model=empty,
                         driver="process")
    with pytest.raises(DriverStartError) as caught:
        DriverProcess(config).start()
    assert caught.value.what == "value-model" and "value_config.json" in str(caught.value)
    assert str(caught.value).startswith("--value-model: ")
