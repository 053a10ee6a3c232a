"""Fixtures of the sandbox tests: one shared fork sandbox per module (a zygote start costs ~1-2 s)."""
from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def sb():
    with Sandbox(SandboxConfig(timeout_s=60)) as box:
        yield box


@pytest.fixture()
def data_csv(tmp_path: Path) -> Path:
    path = tmp_path / "data.csv"
    path.write_text("a,b\n1,2\n3,4\n5,6\n")
    return path
