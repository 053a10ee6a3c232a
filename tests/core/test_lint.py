"""The code stays lint-clean: ``ruff check`` (its rules in ``pyproject.toml``) finds nothing in the packages and
the tests, so the default suite (and so CI) fails on an unused import, a closure over a loop variable, a line past
120 columns or an unsorted import block. By hand: ``.venv/bin/ruff check .`` (``--fix`` mends most findings).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

#: What is linted: every package of the distribution, the tests and the benchmark scripts.
CHECKED = ("jupiter", "search", "sandbox", "value_model", "nbqa_pipeline", "benchmarks", "tests")
#: Folders left out of the check (none now; a folder being reworked elsewhere can wait here for its own ``--fix`` pass).
NOT_YET: tuple[str, ...] = ()


def _ruff() -> str | None:
    """The ruff of this environment (beside its python), else one on PATH."""
    here = Path(sys.executable).with_name("ruff")
    return str(here) if here.is_file() else shutil.which("ruff")


def test_ruff_finds_nothing() -> None:
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed (pip install -e '.[dev]' brings it)")
    excluded = [arg for folder in NOT_YET for arg in ("--extend-exclude", folder)]
    command = [ruff, "check", "--no-cache", "--force-exclude", "--output-format", "concise", *excluded, *CHECKED]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]


def test_the_excluded_folders_exist() -> None:
    """A folder named in ``NOT_YET`` that moved away would silently leave the lint unchecked for its new home."""
    assert all((REPO / folder).is_dir() for folder in NOT_YET)
