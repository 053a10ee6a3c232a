"""The install is quiet: setuptools builds the editable wheel without warnings, and ships the data files the
product needs and no others (no results, no perf helpers, no tests)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BUILD = "from setuptools import build_meta; import sys; print(build_meta.{hook}(sys.argv[1]))"


def _build(hook: str, out: Path) -> tuple[Path, str]:
    run = subprocess.run([sys.executable, "-W", "default", "-c", BUILD.format(hook=hook), str(out)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    return out / run.stdout.strip().splitlines()[-1], run.stdout + run.stderr


def test_editable_build_prints_no_setuptools_warning(tmp_path: Path) -> None:
    _, log = _build("build_editable", tmp_path)
    for warning in ("Please be careful", "BuildBackendWarning", "SetuptoolsDeprecationWarning",
                    "Package would be ignored", "as data is deprecated"):
        assert warning not in log, log[-3000:]


def test_wheel_ships_the_examples_and_the_page(tmp_path: Path) -> None:
    wheel, log = _build("build_wheel", tmp_path)
    assert "SetuptoolsDeprecationWarning" not in log and "Package would be ignored" not in log, log[-3000:]
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "jupiter/examples/titanic_mean_fare.json" in names
    assert "jupiter/examples/titanic_mean_fare.replay.json" in names
    assert any(n.startswith("jupiter/examples/data/") for n in names)
    assert any(n.startswith("jupiter/serve/static/") and n.endswith(".html") for n in names)
    assert not any(n.startswith(("tests/", "benchmarks/perf/", "benchmarks/quality/")) for n in names)
    assert not any(n.startswith("benchmarks/") and not n.endswith(".py") for n in names)  # no results as data
