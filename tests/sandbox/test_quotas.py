"""Quotas that count: a state's memory with its /tmp and /dev/shm files, and the disk of all workspaces."""
from __future__ import annotations

import pytest

from sandbox import ExecStatus, Sandbox, SandboxConfig

FILL = "with open({path!r}, 'wb') as f:\n    for _ in range({mib}):\n        f.write(bytes(2**20))\n"


def test_shared_memory_files_count_in_the_state_memory_limit():
    """800 MB written to /dev/shm used to stay outside every limit (the address space limit does not see it)."""
    with Sandbox(SandboxConfig(state_memory_mb=256, shm_size_mb=1024, preload_modules=())) as box:
        if box._groups is None or box._groups.memory is None:
            pytest.skip("no memory cgroup here: /dev/shm and /tmp are capped by their tmpfs size only")
        root = box.open_root()
        root.run("z = 1")
        ex = root.branch().run(FILL.format(path="/dev/shm/fill", mib=400), timeout=60)
        assert ex.status is ExecStatus.MEMORY_LIMIT
        assert "memory limit" in ex.observation()
        assert root.run("z").result == "1"
        assert root.branch().run("import os\nos.listdir('/dev/shm')").result == "[]"


def test_private_tmpfs_is_capped_in_size():
    with Sandbox(SandboxConfig(shm_size_mb=16, tmp_size_mb=16, preload_modules=())) as box:
        if not box.isolation.bwrap:
            pytest.skip("bubblewrap not available: /tmp and /dev/shm are the host's")
        root = box.open_root()
        for path in ("/dev/shm/fill", "/tmp/fill"):
            ex = root.branch().run(FILL.format(path=path, mib=40))
            assert ex.status is ExecStatus.ERROR and "No space left" in ex.observation()


def test_the_disk_quota_counts_every_file_of_every_workspace(tmp_path):
    """The 1 GiB limit was per file: eleven files of 100 MB went through. Now the sum of the sandbox's
    workspaces is capped: the cell that passes it ends with DISK_LIMIT and its files are gone."""
    with Sandbox(SandboxConfig(disk_quota_mb=64, max_file_size_mb=40, preload_modules=(),
                               root_dir=tmp_path / "box")) as box:
        root = box.open_root()
        root.run("z = 1")
        assert root.branch().run(FILL.format(path="a.bin", mib=30)).status is ExecStatus.OK
        hog = root.branch()
        ex = hog.run("".join(FILL.format(path=f"f{i}.bin", mib=30) for i in range(3)))
        assert ex.status is ExecStatus.DISK_LIMIT and ex.status.is_infrastructure
        assert "disk quota" in ex.observation()
        assert not list(hog.workspace.glob("f*.bin"))
        assert hog.run("z").result == "1"  # the state comes back without the failed cell
        assert root.run("z + 1").result == "2"
