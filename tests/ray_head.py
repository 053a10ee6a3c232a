"""A private Ray head for the slow tests: ``ray start --head --block`` on 127.0.0.1 with its own temp dir and
process group, stopped by its group and PIDs, never with ``ray stop`` (which would end any Ray on the machine)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import psutil

from tests.ports import free_port

RAY_CLI = [sys.executable, "-m", "ray.scripts.scripts"]


def start_head(temp_dir: Path, port: int, env: dict[str, str], log: IO[str], *flags: str) -> subprocess.Popen:
    """The head process (not yet ready: each test waits for what it needs).

    Its dashboard agent gets a free port of its own: Ray's default (52365) is one fixed port for every node on the
    machine, so a second head (another xdist worker's) finds it taken, its agent exits after a few bind retries, and
    every `ray job submit` then fails with "No available agent to submit job" (seen in CI; reproduced by holding
    52365 while this head starts)."""
    return subprocess.Popen(
        [*RAY_CLI, "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(port),
         "--dashboard-agent-listen-port", str(free_port()),
         "--temp-dir", str(temp_dir), "--disable-usage-stats", *flags],
        env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _ours(temp_dir: Path) -> list[int]:
    """PIDs of processes that belong to our head (their command line names our private temp dir)."""
    pids = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(str(temp_dir) in part for part in proc.info["cmdline"] or ()):
                pids.append(proc.info["pid"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [p for p in pids if p != os.getpid()]


def stop_head(head: subprocess.Popen, temp_dir: Path) -> None:
    """SIGTERM, then SIGKILL, to the head's group; SIGKILL to its processes that left the group; the temp dir goes."""
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
    shutil.rmtree(temp_dir, ignore_errors=True)
