"""``jupiter doctor`` starts a real sandbox and says which guarantees hold, what is missing and how to get it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sandbox import Guarantee
from sandbox.runtime.isolation import bwrap_works


def _doctor(tmp_path: Path, *argv: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, TMPDIR=str(tmp_path))
    if path is not None:
        env["PATH"] = path
    code = "import sys\nfrom jupiter.cli import main\nsys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, "doctor", *argv], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180)


def test_the_report_lists_every_guarantee_as_held_or_missing(tmp_path: Path):
    done = _doctor(tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    sandbox = report["sandbox"]
    assert sandbox["runs_cells"] is True and sandbox["error"] is None
    assert sorted(sandbox["held"] + sandbox["missing"]) == sorted(g.name for g in Guarantee)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["bubblewrap can build the sandbox's namespaces"]["ok"] is bwrap_works()
    if bwrap_works():
        assert "HOST_HIDDEN" in sandbox["held"] and sandbox["isolation"].startswith("bubblewrap")


def test_without_bubblewrap_it_names_what_is_gone_and_how_to_get_it(tmp_path: Path):
    empty = tmp_path / "bin"
    empty.mkdir()
    done = _doctor(tmp_path, path=str(empty))  # bwrap not on PATH: the rlimits-only fallback
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "[--] bubblewrap installed" in text and "apt-get install -y bubblewrap" in text
    assert "isolation: none (rlimits only: no bubblewrap)" in text
    missing = text.split("guarantees that do NOT hold", 1)[1]
    assert Guarantee.HOST_HIDDEN.value in missing and Guarantee.FILES_SEPARATED.value in missing
    # the fallback's own warning says what a cell can then do
    assert "can read every world-readable host file" in done.stderr
