"""Ctrl-C during ``python search/collect.py`` leaves a resumable folder; the rerun finishes only the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_fixtures import write_replay, write_tasks

from search.ray_manifest import Manifest, TaskStatus

REPO = Path(__file__).resolve().parents[2]
psutil = pytest.importorskip("psutil")


def _ours(marker: str) -> list[int]:
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(marker in part for part in proc.info["cmdline"] or ()):
                pids.append(proc.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [p for p in pids if p != os.getpid()]


@pytest.mark.slow
def test_ctrl_c_then_rerun(tmp_path):
    """Ctrl-C lands while trees still run: the first run's cells each sleep 0.5 s (a tree takes ~5 s, so the
    23 trees left after the first take ~2 minutes, however late a loaded machine delivers the signal; with
    ~1 s trees all 24 were done twice before it landed). The rerun is the same command over the fast script,
    so finishing the rest takes ~1 s a tree."""
    n = 24
    tasks, replay = write_tasks(tmp_path / "tasks", n=n), write_replay(tmp_path / "tasks", n=n, cell_seconds=0.5)
    out = tmp_path / "collect"
    temp = Path("/tmp") / f"ji-{os.getpid()}"
    env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", PYTHONPATH=str(REPO))
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, str(REPO / "search" / "collect.py"), "--tasks", str(tasks), "--out", str(out),
           "--llm", f"replay:{replay}", "--iterations", "8", "--workers", "1", "--trees-per-worker", "1",
           "--no-progress", "--ray-temp-dir", str(temp)]
    # As from a terminal: a shell that starts a job in the background (`pytest ... &`) sets SIGINT to "ignored",
    # the driver would inherit that and Python would then never raise KeyboardInterrupt.
    driver = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 180
        while not Manifest(out).read():
            assert driver.poll() is None, driver.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no tree finished in time"
            time.sleep(0.05)
        driver.send_signal(signal.SIGINT)
        _, stderr = driver.communicate(timeout=120)
        assert driver.returncode == 130, stderr[-3000:]
        assert "rerun the same command to resume" in stderr
        first = Manifest(out).read()
        assert first and all(r.status is TaskStatus.OK for r in first)
        assert len(first) < n
        names = sorted(p.name for p in (out / "trees").iterdir())
        assert names == sorted(Path(r.tree_file).name for r in first)  # no half-written or temporary files
        assert json.loads((out / "summary.json").read_text())["interrupted"] is True
        deadline = time.monotonic() + 20
        while _ours(str(temp)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _ours(str(temp)) == [], "the interrupted driver left its local Ray running"

        write_replay(tmp_path / "tasks", n=n)  # same command, same script path; its cells no longer sleep
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr[-3000:]
        summary = json.loads(again.stdout.strip().splitlines()[-1])["summary"]
        assert summary["skipped"] == len(first) and summary["done"] == n - len(first)
        ok = [r.task_id for r in Manifest(out).read() if r.status is TaskStatus.OK]
        assert sorted(ok) == sorted(f"T{i}" for i in range(n))  # every task exactly once
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        for pid in _ours(str(temp)):  # a local Ray that outlived its driver
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        import shutil

        shutil.rmtree(temp, ignore_errors=True)
