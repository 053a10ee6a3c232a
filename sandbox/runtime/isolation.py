"""Bubblewrap isolation: no network, only the system, the Python environment and the sandbox folder visible
(read-only but for the sandbox folder), private /tmp, own PID namespace. Without ``bwrap`` the runtimes get rlimits
only (one warning per process)."""
from __future__ import annotations

import ctypes
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
#: Host paths bound read-only for every runtime (symlinks, as on merged-/usr systems, are made as links).
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
#: The ``sandbox`` package's folder, bound read-only for the runtimes: ``runtime/_server.py`` is started by path.
_PACKAGE = Path(__file__).resolve().parents[1]


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

    def describe(self) -> str:
        """The isolation runtimes start under, in words (for errors, logs and the CLI's first lines)."""
        if not self.bwrap:
            return "none (rlimits only: no bubblewrap)"
        user = f"as uid {self.uid}" if self.uid is not None else "as the host's user"
        return f"bubblewrap ({user}, no network, read-only system, a /tmp of its own per state)"

    @property
    def nproc_enforced(self) -> bool:
        """RLIMIT_NPROC does not apply to root: it only holds when runtimes run as another user."""
        return self.uid not in (None, 0) or os.geteuid() != 0


#: Landlock ABI version from which a domain can scope signals (``LANDLOCK_SCOPE_SIGNAL``, Linux 6.12).
LANDLOCK_SIGNAL_ABI = 6


@functools.lru_cache(maxsize=1)
def landlock_abi() -> int:
    """The kernel's Landlock ABI version (0: none). Each fork-backend state enters a Landlock domain of its own
    that scopes its signals and its ptrace / ``/proc/<pid>/root`` access to itself and its branches
    (``sandbox.runtime._server._scope_signals``); it needs ABI 6."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # ..._VERSION flag
    return max(0, int(version))


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


def _visible(path: Path, bound: list[Path]) -> bool:
    """Whether ``path`` already resolves inside the runtime's root: it lies, as written, under a bound folder, and
    so does what it resolves to (a venv reached through a symlink needs its own bind at the symlink's path)."""
    real = Path(os.path.realpath(path))
    return (any(Path(os.path.abspath(path)).is_relative_to(done) for done in bound)
            and any(real.is_relative_to(os.path.realpath(done)) for done in bound))


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
            log.warning("bubblewrap (bwrap) is not available: sandbox runtimes run with rlimits only, so cells "
                        "can read every world-readable host file and reach the network, and states can write each "
                        "other's files (apt-get install -y bubblewrap; `jupiter doctor` lists what holds)")
        return IsolationPlan(bwrap=False, uid=None, prefix=())
    is_root = os.geteuid() == 0
    uid = config.run_as_uid if is_root else None
    # An empty root with only what a cell needs, read-only: the system (programs, libraries, /etc), the Python
    # environment and this package's folder. Not ``/`` as a whole: cells read every world-readable host file
    # then, the project checkout and any folder beside it (a benchmark's labels) included.
    cmd = ["bwrap", "--dev", "/dev", "--proc", "/proc", "--unshare-net", "--unshare-pid", "--unshare-ipc",
           "--unshare-uts", "--die-with-parent", "--new-session"]
    for top in SYSTEM_PATHS:
        path = Path(top)
        if path.is_symlink():
            cmd += ["--symlink", os.readlink(path), top]
        elif path.exists():
            cmd += ["--ro-bind", top, top]
    cmd += ["--perms", "1777", "--tmpfs", "/tmp"]
    # joblib / multiprocessing need a writable /dev/shm (else every cell that uses them warns on stderr).
    cmd += ["--perms", "1777", "--tmpfs", "/dev/shm"]
    needed = {Path(sys.prefix), Path(sys.base_prefix), Path(config.python).parent.parent,
              Path(os.path.realpath(config.python)).parent.parent, _PACKAGE,
              *(Path(p) for p in config.readonly_paths)}
    bound = [Path(top) for top in SYSTEM_PATHS]
    made: set[Path] = set()
    for path in sorted(needed):
        # os.path.exists, not Path.exists: a path through a folder this user cannot enter (an interpreter under
        # another user's home behind a shared venv's symlink) is not there for us, not an error
        if not os.path.exists(path) or _visible(path, bound):
            continue
        for parent in reversed(path.parents):
            if parent != Path("/") and parent not in made and not _visible(parent, bound):
                made.add(parent)
                cmd += ["--perms", "0755", "--dir", str(parent)]  # else bwrap makes them 0700
        cmd += ["--ro-bind", str(path), str(path)]
        bound.append(path)
    mount = Path(_MOUNT)
    cmd += ["--bind", str(root_dir), str(mount)]
    for path in readonly_dirs:
        inner = mount / Path(path).relative_to(root_dir)
        cmd += ["--ro-bind", str(path), str(inner)]
    if uid is not None:
        cmd += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    cmd.append("--")
    return IsolationPlan(bwrap=True, uid=uid, prefix=tuple(cmd), host_root=root_dir, mount=mount)
