"""``jupiter serve --ray ADDRESS`` on a loopback Ray cluster of our own (``ray start --head`` on 127.0.0.1, stopped
by its process group and PIDs, never with ``ray stop``): the trees run on Ray tree workers, the server keeps
the API and the database."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from serve_helpers import TITANIC_REPLAY
from tests.ports import free_port

psutil = pytest.importorskip("psutil")
pytest.importorskip("ray")


def _ours(temp_dir: Path) -> list[int]:
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(temp_dir) in part for part in proc.info["cmdline"] or ()):
                pids.append(proc.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [p for p in pids if p != os.getpid()]


@pytest.fixture()
def ray_head(tmp_path):
    # outside /tmp and short: Ray's socket paths must fit in 107 bytes
    temp_dir = Path("/var/tmp") / f"js-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    port = free_port()
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    log = open(tmp_path / "head.log", "w")
    head = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", "--node-ip-address", "127.0.0.1",
         "--port", str(port), "--include-dashboard=false", "--num-cpus", "3", "--temp-dir", str(temp_dir),
         "--disable-usage-stats"],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        time.sleep(5)
        if head.poll() is not None:
            pytest.fail(f"ray head did not come up: {(tmp_path / 'head.log').read_text()[-2000:]}")
        yield f"127.0.0.1:{port}", env
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                pass
            try:
                head.wait(timeout=20)
                break
            except subprocess.TimeoutExpired:
                continue
        for pid in _ours(temp_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


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
