"""What both backends share: the ``Runtime`` protocol (what the Sandbox asks of a process holding one notebook
state), a cell's raw result, the runtime errors, the runtimes' environment and memory reads from ``/proc``."""
from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sandbox.runtime.isolation import IsolationPlan
from sandbox.runtime.workspace import Layout

__all__ = ["HOST_ENV_ALLOWED", "ProcessBudgetFull", "RawResult", "Runtime", "RuntimeDied", "RuntimeDiskLimit",
           "RuntimeOutOfMemory", "RuntimeTimeout", "StartupError", "pss_bytes", "runtime_env", "uss_bytes"]


class StartupError(RuntimeError):
    """A runtime or kernel failed to start or failed its ``1+1`` self-check (the message names why)."""


class RuntimeDied(RuntimeError):
    """The runtime process vanished while serving a request."""


class RuntimeOutOfMemory(RuntimeDied):
    """The kernel killed the runtime for passing its state's memory limit (memory cgroup)."""


class ProcessBudgetFull(RuntimeError):
    """The runtime could not fork: its sandbox's process budget is full (or memory is short). Nothing died."""


class RuntimeDiskLimit(RuntimeError):
    """The sandbox's workspaces passed the disk quota while the cell ran; the runtime was killed."""


class RuntimeTimeout(RuntimeError):
    """The cell ran past its time limit; the runtime was killed."""


@dataclass(frozen=True)
class RawResult:
    """A cell's result as the runtime reported it (before status mapping)."""

    outputs: list[dict[str, Any]]
    success: bool
    execution_count: int | None
    duration_s: float
    dropped_chars: int
    ename: str | None = None



class Runtime(Protocol):
    """A process holding one notebook state (``fork.ForkRuntime``, ``kernel.KernelRuntime``), as the Sandbox uses
    it. Not thread-safe: one state owns it. ``generation`` names this process incarnation; ``pid`` is the host's
    pid of the process (None when unknown); ``can_fork`` says whether ``fork`` can ever copy it (False: branches
    replay); ``watches_disk`` whether ``run`` calls ``over_quota`` while the cell runs."""

    @property
    def generation(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def pid(self) -> int | None: ...

    @property
    def can_fork(self) -> bool: ...

    @property
    def watches_disk(self) -> bool: ...

    @property
    def alive(self) -> bool: ...

    def run(self, code: str, timeout_s: float, over_quota: Callable[[], str | None] | None = None,
            check_every_s: float = 0.5) -> RawResult:
        """Run a cell (``timeout_s`` seconds at most). Raises RuntimeTimeout, RuntimeDied, RuntimeOutOfMemory or
        RuntimeDiskLimit (when ``over_quota``, called every ``check_every_s`` s, returns a reason)."""
        ...

    def fork(self, workspace: Path, generation: int, timeout_s: float) -> Runtime | None:
        """A copy of this state working in ``workspace``; None when it cannot be forked now."""
        ...

    def memory_bytes(self) -> int:
        """Unique memory (USS) of the process now, in bytes (reads ``smaps_rollup``)."""
        ...

    def close(self) -> None: ...


def _smaps_bytes(pid: int, fields: tuple[str, ...]) -> int:
    """The sum of ``fields`` (line prefixes such as ``"Pss:"``) of a process's ``smaps_rollup`` in bytes, 0 if
    the process is gone."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(fields):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return 0
    return total


def uss_bytes(pid: int) -> int:
    """Unique (private) memory of a process in bytes, 0 if it is gone."""
    return _smaps_bytes(pid, ("Private_Clean:", "Private_Dirty:"))


def pss_bytes(pid: int) -> int:
    """Proportional set size of a process in bytes (shared pages split among sharers), 0 if gone."""
    return _smaps_bytes(pid, ("Pss:",))


#: Host variables that reach cells (names, or prefixes ending in ``*``). Everything else of the host's environment
#: is dropped: it is where API keys live. ``SandboxConfig.env`` adds variables on purpose.
HOST_ENV_ALLOWED = ("PATH", "LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "LD_LIBRARY_PATH", "GLIBC_TUNABLES",
                    "PYTHONHASHSEED", "PYTHONIOENCODING", "PYTHONUTF8")


def _allowed(name: str) -> bool:
    return any(name == rule or (rule.endswith("*") and name.startswith(rule[:-1])) for rule in HOST_ENV_ALLOWED)


def runtime_env(layout: Layout, plan: IsolationPlan | None = None, huge_pages: bool = False,
                extra: Mapping[str, str] | Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """Environment of runtime processes: the host's allow-listed variables (``HOST_ENV_ALLOWED``), ``extra``
    (``SandboxConfig.env``), one BLAS/OpenMP thread (fork safety), Agg-based inline figures, and optionally a
    THP-backed malloc heap (cheaper page-table copies at fork; see SandboxConfig.huge_pages)."""
    env = {name: value for name, value in os.environ.items() if _allowed(name)}
    env.setdefault("PATH", os.defpath)
    env.update(dict(extra))
    if huge_pages:
        tunables = [t for t in env.get("GLIBC_TUNABLES", "").split(":") if t and "malloc.hugetlb" not in t]
        env["GLIBC_TUNABLES"] = ":".join([*tunables, "glibc.malloc.hugetlb=1"])
    home = plan.inside(layout.home) if plan is not None else str(layout.home)
    env.update({
        "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "NUMEXPR_NUM_THREADS": "1",
        "VECLIB_MAXIMUM_THREADS": "1", "JE_ARROW_MALLOC_CONF": "background_thread:false",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "HOME": home, "IPYTHONDIR": f"{home}/.ipython", "MPLCONFIGDIR": f"{home}/.matplotlib",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1", "JPY_PARENT_PID": str(os.getpid()),
    })
    env.pop("PYTHONSTARTUP", None)
    return env
