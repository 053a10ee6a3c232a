"""The isolated runtime starts wherever the project, its virtual environment and the data live.

Each state of the bubblewrap runtime gets a ``/tmp`` of its own; host folders bound under ``/tmp`` (a checkout,
a virtual environment or an input folder that lives there) must be bound again into it, read-only, not copied:
a copy of the README's full environment (3.7 GB) filled the state's ``/tmp`` and the state died before its
hello. Places tried: under ``/tmp``, under names with spaces and non-ASCII letters, through a symlinked home and
a symlinked venv, as root and as an unprivileged user (for whom the project's venv is read-only), with the
environment this suite runs in (``scripts/install.sh``'s, in CI).
"""
from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import ExecStatus, Sandbox, SandboxConfig
from sandbox.runtime.isolation import bwrap_works

pytestmark = pytest.mark.skipif(not bwrap_works(), reason="bubblewrap is not usable here")

VENV = Path(sys.prefix)
PROBE = (
    "import sys, os, pandas\n"
    "print(sys.prefix)\n"
    "print(pandas.__name__)\n"
)


def _cells(python: str, **config) -> list[str]:
    """The observations of a root cell, a branch's cell and a branch of that branch, all in one sandbox."""
    with Sandbox(SandboxConfig(python=python, timeout_s=60, **config)) as box:
        root = box.open_root()
        first = root.run(PROBE)
        branch = root.branch()
        second = branch.run("print('branch', 1 + 1)")
        third = branch.branch().run("print('grandchild', 2 + 2)")
    assert [e.status for e in (first, second, third)] == [ExecStatus.OK] * 3, [first.observation(),
                                                                                 second.observation(),
                                                                                 third.observation()]
    return [first.observation(), second.observation(), third.observation()]


def _linked_venv(folder: Path) -> Path:
    """``folder/.venv`` as a symlink to this suite's environment: the whole environment seen under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".venv").symlink_to(VENV, target_is_directory=True)
    return folder / ".venv" / "bin" / "python"


@pytest.mark.parametrize("name", ["plain", "with space", "jüpiter ñame"])
def test_the_runtime_starts_from_the_full_environment_under_tmp(tmp_path: Path, name: str):
    assert str(tmp_path).startswith("/tmp/")
    python = _linked_venv(tmp_path / name)
    root, branch, grandchild = _cells(str(python))
    assert root.splitlines()[0] == str(python.parent.parent)  # the venv as the cells see it: at its /tmp path
    assert "pandas" in root and "branch 2" in branch and "grandchild 4" in grandchild


def test_the_runtime_starts_through_a_symlinked_home(tmp_path: Path):
    real_home = tmp_path / "disk" / "home of user"
    python = _linked_venv(real_home / "project")
    (tmp_path / "home").symlink_to(real_home, target_is_directory=True)
    linked = tmp_path / "home" / "project" / ".venv" / "bin" / "python"
    assert linked.exists() and python.exists()
    root, _branch, _grandchild = _cells(str(linked))
    assert "pandas" in root


def test_host_folders_under_tmp_stay_bound_read_only_in_every_state(tmp_path: Path):
    shared = tmp_path / "inputs ü"
    shared.mkdir()
    (shared / "table.csv").write_text("a\n1\n")
    (shared / "table.csv").chmod(0o666)  # only the read-only bind can refuse a write
    host_inode = (shared / "table.csv").stat().st_ino
    code = (
        f"import os\npath = {str(shared / 'table.csv')!r}\n"
        "print(open(path).read().strip().replace(chr(10), ' '), os.stat(path).st_ino)\n"
        "try:\n    open(path, 'a')\n    print('writable')\nexcept OSError as exc:\n    print('errno', exc.errno)\n"
    )
    with Sandbox(SandboxConfig(timeout_s=60, readonly_paths=(shared,))) as box:
        root = box.open_root()
        seen = [root.run(code).observation()]
        branch = root.branch()
        seen.append(branch.run(code).observation())
        seen.append(branch.branch().run(code).observation())
    for text in seen:
        assert f"a 1 {host_inode}" in text  # the host's file itself (bound), not a copy
        assert "errno 30" in text and "writable" not in text  # EROFS in the root state and in every branch


def _as_nobody(code: str, cwd: Path) -> list[str]:
    """``python -c code`` as uid 65534 with this suite's venv, which that user cannot write.

    Where the venv's interpreter lies behind a folder only root may enter (pyenv under ``/root``, as on this
    project's machines), a private mount namespace shows that one path to everybody: the folder becomes an
    empty tmpfs with just the interpreter's tree bound back. Nothing changes outside the namespace."""
    steps = []
    base = Path(os.path.realpath(sys.executable)).parent.parent
    for folder in [*reversed(base.parents), base]:
        if folder != Path("/") and not os.stat(folder).st_mode & 0o001:
            child = base.relative_to(folder).parts[0]
            keep = cwd / f"kept-{len(steps)}"
            keep.mkdir()
            steps.append(f"mount --bind {shlex.quote(str(folder / child))} {shlex.quote(str(keep))} && "
                         f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(folder))} && "
                         f"mkdir {shlex.quote(str(folder / child))} && "
                         f"mount --bind {shlex.quote(str(keep))} {shlex.quote(str(folder / child))}")
    run = (f"exec setpriv --reuid=65534 --regid=65534 --clear-groups {shlex.quote(sys.executable)} -c "
           f"{shlex.quote(code)}")
    script = " && ".join([*steps, run])
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script], cwd=cwd,
                          env={**os.environ, "HOME": str(cwd), "TMPDIR": str(cwd)},
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_an_unprivileged_user_runs_cells_from_a_venv_they_cannot_write(tmp_path: Path):
    if os.geteuid() != 0 or not (shutil.which("setpriv") and shutil.which("unshare")):
        pytest.skip("needs root, setpriv and unshare to become another user")
    home = tmp_path / "nobody home"
    home.mkdir()
    os.chown(home, 65534, 65534)
    os.chmod(tmp_path, 0o755)
    code = (
        "import json, os, sys\nfrom sandbox import Sandbox, SandboxConfig\n"
        "assert os.geteuid() == 65534 and not os.access(sys.prefix, os.W_OK)\n"
        "with Sandbox(SandboxConfig(timeout_s=60)) as box:\n"
        "    root = box.open_root()\n"
        "    a = root.run('import os, pandas; print(os.geteuid(), pandas.__name__)').observation()\n"
        "    b = root.branch().run('print(6 * 7)').observation()\n"
        "    print(json.dumps([a, b, box.isolation.bwrap]))\n"
    )
    first, second, isolated = _as_nobody(code, home)
    assert first.split() == ["65534", "pandas"] and second.strip() == "42" and isolated is True


def test_a_state_that_dies_before_its_hello_says_why_and_under_which_isolation(caplog):
    """A branch copies its parent's files at birth; under a file-size limit of one byte (a cell lowered it, and
    its branches inherit it) the copy fails and the branch dies before its hello. The sandbox says why, in one
    line, and rebuilds the branch by replay."""
    with Sandbox(SandboxConfig(timeout_s=60)) as box:
        root = box.open_root()
        made = root.run("import os, resource\nopen('notes.txt', 'w').write('x' * 100)\n"
                        "resource.setrlimit(resource.RLIMIT_FSIZE, (1, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))")
        assert made.status is ExecStatus.OK
        with caplog.at_level(logging.WARNING, logger="sandbox"):
            branch = root.branch()
            assert branch.run("print(open('notes.txt').read()[:3])").observation().strip() == "xxx"
    lines = [r.getMessage() for r in caplog.records if "branching state" in r.getMessage()]
    assert lines, [r.getMessage() for r in caplog.records]
    line = lines[0]
    assert "died before it started (isolation: bubblewrap" in line and "jupiter doctor" in line
    assert "OSError: [Errno 27] File too large" in line and "\n" not in line
    assert any("last stderr lines" in r.getMessage() and "Traceback" in r.getMessage() for r in caplog.records)
