"""End to end: ``ray start --head`` on 127.0.0.1, then ``ray job submit --working-dir <repo> -- python
search/collect.py ...`` with the replay policy and real sandboxes. The head is ours alone (own ports, own temp
dir) and is stopped by its process group and PIDs, never with ``ray stop``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_fixtures import write_replay, write_tasks

from search.ray_manifest import Manifest, TaskStatus
from search.ray_workdir import DEFAULT_EXCLUDES
from tests.ports import free_port
from tests.ray_head import RAY_CLI, start_head, stop_head

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def ray_head(tmp_path):
    # Outside /tmp: bubblewrap gives each sandbox runtime a private /tmp, which would hide the job's working
    # dir (Ray unpacks it under its temp dir) and with it sandbox/runtime/_server.py. Short: socket paths <= 107 bytes.
    temp_dir = Path("/var/tmp") / f"jh-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    port, dash = free_port(), free_port()
    # The job's entrypoint names a bare `python`, as a user's would: on a real cluster that is the activated
    # environment's. Here the head (and the job it spawns) gets this interpreter's bin first on PATH, so the
    # test does not depend on how the calling shell was set up (CI runs .venv/bin/python without activation).
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    env = dict(os.environ, PATH=path, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    log = open(tmp_path / "head.log", "w")
    head = start_head(temp_dir, port, env, log, "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
                      "--include-dashboard=true", "--num-cpus", "2")
    address = f"http://127.0.0.1:{dash}"
    try:
        # Ready means "accepts a job", not "answers `job list`": the dashboard answers before the node's job
        # agent has registered, and a submission then waits only 10 s for it (Ray's WAIT_AVAILABLE_AGENT_TIMEOUT)
        # before it fails with "No available agent to submit job, please try again later" - which is what a
        # loaded CI machine saw. A trivial job, retried until accepted, waits for the agent itself.
        deadline = time.monotonic() + 180
        while True:
            probe = subprocess.run([*RAY_CLI, "job", "submit", "--address", address, "--no-wait", "--",
                                    "python", "-c", "pass"], env=env, capture_output=True, text=True, timeout=60)
            if probe.returncode == 0:
                break
            if head.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"ray head did not accept a job: {probe.stderr[-1500:]}\n"
                            f"head log: {(tmp_path / 'head.log').read_text()[-2000:]}")
            time.sleep(2)
        yield address, env
    finally:
        stop_head(head, temp_dir)
        log.close()


@pytest.mark.slow
def test_job_submit_collects_every_tree(ray_head, tmp_path):
    address, env = ray_head
    tasks, replay = write_tasks(tmp_path / "tasks", n=4), write_replay(tmp_path / "tasks", n=4)
    out = tmp_path / "collect"
    runtime_env = json.dumps({"excludes": list(DEFAULT_EXCLUDES), "env_vars": {"RAY_AUTH_MODE": "disabled"}})
    done = subprocess.run(
        [*RAY_CLI, "job", "submit", "--address", address, "--working-dir", str(REPO),
         "--runtime-env-json", runtime_env, "--",
         "python", "search/collect.py", "--tasks", str(tasks), "--out", str(out), "--llm", f"replay:{replay}",
         "--iterations", "6", "--workers", "2", "--trees-per-worker", "2", "--no-progress"],
        env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(next(line for line in done.stdout.splitlines() if line.startswith('{"summary"')))["summary"]
    assert summary["done"] == 4 and summary["solved"] == 4
    ok = [r for r in Manifest(out).read() if r.status is TaskStatus.OK]
    assert sorted(r.task_id for r in ok) == ["T0", "T1", "T2", "T3"]
    assert all((out / r.tree_file).is_file() for r in ok)
