"""Bubblewrap isolation: no network, read-only system, writable sandbox folder only, private /tmp, own PID
namespace. Without ``bwrap`` the runtimes get rlimits only (one warning per process)."""
from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sandbox.config import Isolation, SandboxConfig

__all__ = ["IsolationPlan", "bwrap_works", "plan_isolation"]

log = logging.getLogger(__name__)
_warned = False
_MOUNT = "/tmp/jupiter-sandbox"  # inside the runtime's private /tmp


@dataclass(frozen=True)
class IsolationPlan:
    """How runtimes of one Sandbox are started: the command prefix and the uid they drop to."""

    bwrap: bool
    uid: int | None
    prefix: tuple[str, ...]
    host_root: Path | None = None
    mount: Path | None = None

    def inside(self, path: Path) -> str:
        """Where a host path under the sandbox folder appears to the runtime (bwrap binds it elsewhere, so
        that folders above it need not be readable by the runtime's user)."""
        if self.host_root is None or self.mount is None:
            return str(path)
        return str(self.mount / Path(path).relative_to(self.host_root))

    @property
    def nproc_enforced(self) -> bool:
        """RLIMIT_NPROC does not apply to root: it only holds when runtimes run as another user."""
        return self.uid not in (None, 0) or os.geteuid() != 0


@functools.lru_cache(maxsize=1)
def bwrap_works() -> bool:
    """True when ``bwrap`` is installed and can build the namespaces we need on this host."""
    exe = shutil.which("bwrap")
    if exe is None:
        return False
    cmd = [exe, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
           "--tmpfs", "/tmp", "true"]
    try:
        return subprocess.run(cmd, capture_output=True, timeout=30, check=False).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _under(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def plan_isolation(config: SandboxConfig, root_dir: Path, readonly_dirs: tuple[Path, ...]) -> IsolationPlan:
    """Decide the command prefix for runtimes whose writable world is ``root_dir``.

    ``readonly_dirs`` (inside root_dir) are bound read-only again (the input files).
    Raises RuntimeError when isolation=BWRAP and bubblewrap does not work here.
    """
    global _warned
    use = config.isolation != Isolation.NONE and bwrap_works()
    if config.isolation == Isolation.BWRAP and not use:
        raise RuntimeError("SandboxConfig.isolation='bwrap' but bubblewrap is missing or does not work here "
                           "(install it with `apt-get install -y bubblewrap`)")
    if not use:
        if config.isolation == Isolation.AUTO and not _warned:
            _warned = True
            log.warning("bubblewrap (bwrap) is not available: sandbox runtimes run with rlimits only, "
                        "without network/filesystem isolation")
        return IsolationPlan(bwrap=False, uid=None, prefix=())
    is_root = os.geteuid() == 0
    uid = config.run_as_uid if is_root else None
    cmd = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid",
           "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session", "--perms", "1777",
           "--tmpfs", "/tmp"]
    # joblib / multiprocessing need a writable /dev/shm (else every cell that uses them warns on stderr).
    cmd += ["--perms", "1777", "--tmpfs", "/dev/shm"]
    hidden = [Path("/tmp")]
    home = Path(os.path.expanduser("~"))
    if home != Path("/") and not _under(root_dir, home):
        # Hide the host user's home.
        cmd += ["--tmpfs", str(home)]
        hidden.append(home)
    # Re-expose (read-only) what the runtime needs from the hidden folders: the interpreter and this
    # package, which live under /tmp when Ray unpacks a job's working dir there.
    needed = {Path(sys.prefix), Path(sys.base_prefix), Path(config.python).resolve().parent.parent,
              Path(__file__).resolve().parent.parent}
    made: set[Path] = set()
    for path in sorted(needed):
        top = next((h for h in hidden if _under(path, h)), None)
        if top is None or not path.exists():
            continue
        for parent in reversed(path.parents):
            if _under(parent, top) and parent.resolve() != top.resolve() and parent not in made:
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", str(parent)]  # else bwrap makes them 0700
        cmd += ["--ro-bind", str(path), str(path)]
    mount = Path(_MOUNT)
    cmd += ["--bind", str(root_dir), str(mount)]
    for path in readonly_dirs:
        inner = mount / Path(path).relative_to(root_dir)
        cmd += ["--ro-bind", str(path), str(inner)]
    if uid is not None:
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    cmd.append("--")
    return IsolationPlan(bwrap=True, uid=uid, prefix=tuple(cmd), host_root=root_dir, mount=mount)
