"""What the host reads for a cell never follows a link the cell planted: a crash report, a state's files."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox import ExecStatus, WorkspaceError

SECRET = "jupiter-host-secret-4711"


@pytest.fixture()
def host_secret(tmp_path: Path) -> Path:
    """A file only the host may read (mode 0600, outside every sandbox folder)."""
    path = tmp_path / "host_secret.txt"
    path.write_text(f"root:{SECRET}:19000::::::\n")
    os.chmod(path, 0o600)
    return path


def test_a_crash_report_replaced_by_a_link_is_not_followed(sb, host_secret):
    """The cell swaps its own crash report for a link to a host file and dies: the host must not read the file
    through the link into the DIED observation."""
    faults = sb.isolation.inside(sb.layout.root / "faults")  # where reports were written as files before
    code = (
        "import os\n"
        "try:\n"
        f"    report = os.path.join({faults!r}, f'{{os.getpid()}}.txt')\n"
        "    if os.path.lexists(report):\n"
        "        os.remove(report)\n"
        f"    os.symlink({str(host_secret)!r}, report)\n"
        "finally:\n"
        "    os._exit(1)\n"
    )
    root = sb.open_root()
    ex = root.branch().run(code)
    assert ex.status is ExecStatus.DIED
    assert SECRET not in ex.observation()
    assert root.run("1 + 1").result == "2"


def test_a_crash_report_is_still_named(sb):
    ex = sb.open_root().run("import ctypes\nctypes.string_at(0)")
    assert ex.status is ExecStatus.DIED and "Segmentation fault" in ex.observation()


def test_read_file_does_not_follow_a_link_out_of_the_workspace(sb, host_secret, data_csv):
    state = sb.open_root([data_csv])
    ex = state.run(f"import os\nos.symlink({str(host_secret)!r}, 'submission.csv')\n"
                   "os.symlink('/etc', 'etc')\nos.symlink('.', 'here')")
    assert ex.status is ExecStatus.OK
    with pytest.raises(WorkspaceError, match="link"):
        state.read_file("submission.csv")
    with pytest.raises(WorkspaceError, match="link"):
        state.read_file("etc/passwd")
    with pytest.raises(WorkspaceError, match="link"):
        state.read_file("here/data.csv")
    # the read-only inputs are links too, and stay readable by name
    assert state.read_file("data.csv") == data_csv.read_bytes()


def test_read_file_reads_files_and_subfolders_of_the_workspace(sb):
    state = sb.open_root()
    state.run("import os\nos.makedirs('out', exist_ok=True)\nopen('out/r.txt', 'w').write('ok')")
    assert state.read_file("out/r.txt") == b"ok"
    with pytest.raises(FileNotFoundError):
        state.read_file("missing.csv")
    with pytest.raises(WorkspaceError):
        state.read_file("../x")
