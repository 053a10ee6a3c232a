"""Isolation must not hide what cells and the runtime itself need."""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from sandbox import ExecStatus


def test_joblib_parallel_works_without_stderr_noise(sb):
    ex = sb.open_root().run(
        "from joblib import Parallel, delayed\nprint(Parallel(n_jobs=2)(delayed(abs)(i) for i in [-1, -2]))"
    )
    assert ex.status is ExecStatus.OK
    assert "[1, 2]" in ex.observation()
    assert "Permission denied" not in ex.observation() and "serial mode" not in ex.observation()


def test_runtime_starts_when_the_package_lives_under_tmp(repo_dir: Path):
    """Ray unpacks a job's working dir under /tmp, which the sandbox replaces with a private tmpfs."""
    with tempfile.TemporaryDirectory(dir="/tmp") as copy:
        for package in ("sandbox", "jupiter"):
            shutil.copytree(repo_dir / package, Path(copy) / package)
        code = (
            f"import sandbox\nassert sandbox.__file__.startswith({copy!r})\n"
            "from sandbox import Sandbox, SandboxConfig\n"
            "with Sandbox(SandboxConfig()) as sb:\n    print(sb.open_root().run('print(40 + 2)').observation())"
        )
        proc = subprocess.run([sys.executable, "-c", code], cwd=copy, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "42" in proc.stdout
