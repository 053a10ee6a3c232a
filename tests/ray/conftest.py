"""Fixtures of the Ray tests: a private local Ray (3 logical CPUs) and the tasks of ``ray_fixtures``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from ray_fixtures import write_replay, write_tasks


@pytest.fixture(scope="session", autouse=True)
def _ray_env():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    yield


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    """A private Ray instance for the module (never a cluster found on this machine)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    temp = Path("/tmp") / f"jr-{os.getpid()}"  # short: Ray's socket paths must fit in 107 bytes
    # 3 logical CPUs on this 2-core machine: two tree workers plus the shared policy actor of one test.
    ray.init(address="local", num_cpus=3, include_dashboard=False, _temp_dir=str(temp),
             logging_level="WARNING",
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[2])}})
    yield ray
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def task_files(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("ray-tasks")
    return write_tasks(folder), write_replay(folder)
