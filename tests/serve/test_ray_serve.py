"""``jupiter serve --ray ADDRESS`` on a loopback Ray cluster of our own (``ray start --head`` on 127.0.0.1, stopped
by its process group and PIDs, never with ``ray stop``): the trees run on Ray tree workers, the server keeps
the API and the database."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from serve_helpers import TITANIC_REPLAY

from tests.ports import free_port
from tests.ray_head import start_head, stop_head

pytest.importorskip("ray")


@pytest.fixture()
def ray_head(tmp_path):
    # outside /tmp and short: Ray's socket paths must fit in 107 bytes
    temp_dir = Path("/var/tmp") / f"js-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    port = free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    log = open(tmp_path / "head.log", "w")
    head = start_head(temp_dir, port, env, log, "--include-dashboard=false", "--num-cpus", "3")
    try:
        time.sleep(5)
        if head.poll() is not None:
            pytest.fail(f"ray head did not come up: {(tmp_path / 'head.log').read_text()[-2000:]}")
        yield f"127.0.0.1:{port}", env
    finally:
        stop_head(head, temp_dir)
        log.close()


@pytest.mark.slow
def test_serve_runs_trees_on_ray(ray_head, start_server):
    address, env = ray_head
    os.environ.update({k: env[k] for k in ("RAY_AUTH_MODE", "RAY_USAGE_STATS_ENABLED")})
    server = start_server("--llm", f"replay:{TITANIC_REPLAY}", "--ray", address, name="ray")
    assert server.get("/healthz").json()["ray"] is True
    ids = [server.submit(settings={"iterations": 6, "expansions": 2}).json()["id"] for _ in range(2)]
    for job_id in ids:
        job = server.wait(job_id, timeout=240)
        assert job["status"] == "done", (job, server.log())
        assert job["result"]["answer"] == "@mean_fare[34.65]"
        events = list(server.events(job_id))
        assert events[0][1]["tag"] == "0" and events[-1][0] == "done"
        assert server.get(f"/v1/tasks/{job_id}/solution.ipynb").status_code == 200
