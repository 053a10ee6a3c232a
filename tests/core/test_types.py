"""The typed packages type-check: ``mypy`` (``[tool.mypy]`` in ``pyproject.toml``: strict, on ``sandbox/``, its API
and its plumbing, and ``search/``) finds nothing, so the default suite (and so CI) fails on a call that does not
match a signature, a None not handled or a new function without annotations there. By hand: ``.venv/bin/mypy``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from tests.conftest import REPO


def test_mypy_finds_nothing() -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[dev]' brings it)")
    # in a process of its own, from the checkout: mypy reads its configuration and its files from pyproject.toml
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
