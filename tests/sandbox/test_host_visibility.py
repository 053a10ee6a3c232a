"""Cells see what they need of the host (the Python environment, system libraries, their inputs) and nothing
else: not the project checkout, not a folder beside it (a benchmark's labels), not a host data folder."""
from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from sandbox import ExecStatus

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture()
def host_files():
    """World-readable files the host has: in the checkout, beside it, in a data folder of the host."""
    tag = secrets.token_hex(6)
    paths = [REPO / f".probe-{tag}.txt", REPO.parent / f".jupiter-probe-{tag}" / "labels.csv",
             Path("/srv") / f"jupiter-probe-{tag}.csv"]
    made = []
    for path in paths:
        try:
            path.parent.mkdir(exist_ok=True)
            path.write_text("label\n1\n")
            os.chmod(path, 0o644)
            made.append(path)
        except OSError:
            continue
    yield made
    for path in made:
        path.unlink()
        if path.parent.name.startswith(".jupiter-probe-"):
            path.parent.rmdir()


def test_cells_do_not_see_host_files_beyond_what_they_need(sb, host_files):
    if not sb.isolation.bwrap:
        pytest.skip("bubblewrap not available: cells see every world-readable host file")
    assert host_files
    root = sb.open_root()
    for path in [*host_files, REPO / "setup.cfg", REPO / "README.md"]:
        ex = root.run(f"open({str(path)!r}).read()")
        assert ex.status is ExecStatus.ERROR, path
        assert ex.error.ename in ("FileNotFoundError", "PermissionError"), ex.observation()


def test_what_cells_need_is_still_there(sb):
    ex = sb.open_root().run(
        "import subprocess, numpy, pandas, matplotlib.pyplot as plt, sklearn, ssl, locale\n"
        "plt.plot([1, 2]); plt.show()\n"
        "print(subprocess.run(['ls', '/'], capture_output=True, text=True).returncode)")
    assert ex.status is ExecStatus.OK, ex.observation()
    assert ex.stdout.strip().endswith("0")
