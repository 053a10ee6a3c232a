"""Sandbox settings: one frozen, validated value object (errors name the bad field)."""
from __future__ import annotations

import enum
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator

from jupiter.config_model import ConfigModel, Flag, PositiveFloat, PositiveInt

__all__ = ["Backend", "Isolation", "SandboxConfig", "ConfigError", "CELL_TIMEOUT_S"]

#: The default wall-clock limit of one cell (seconds): ``SandboxConfig.timeout_s``, the one owner of the cell
#: timeout; the layers above pass their setting into the sandbox's config, not into each run call.
CELL_TIMEOUT_S = 180.0


class ConfigError(ValueError):
    """A SandboxConfig field has a bad value; the message names the field."""


_Cap = Annotated[int, Field(strict=True, ge=1)] | None  # an optional cap: a positive whole number, or None (no cap)
_Chars = Annotated[int, Field(strict=True, ge=100)]


class Backend(str, enum.Enum):
    """How notebook states are kept.

    FORK: a state is a live IPython process; ``branch()`` forks it (copy-on-write, O(1) in path length).
    KERNEL: any installed Jupyter kernel through jupyter_client; ``branch()`` starts a kernel and replays the
    recorded cells (the reference behaviour, and the way to run non-Python kernels).
    """

    FORK = "fork"
    KERNEL = "kernel"


class Isolation(str, enum.Enum):
    """AUTO: bubblewrap when ``bwrap`` works here, else rlimits only (one warning). BWRAP: required. NONE: off."""

    AUTO = "auto"
    BWRAP = "bwrap"
    NONE = "none"


_MB = 1024 * 1024
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SandboxConfig(ConfigModel):
    """Settings of one :class:`sandbox.Sandbox`.

    Limits are per runtime process (a notebook state); ``None`` means "no limit" for the optional caps.
    """

    config_error = ConfigError

    backend: Backend = Backend.FORK
    """FORK (default) or KERNEL; plain strings ``"fork"``/``"kernel"`` are accepted."""
    timeout_s: PositiveFloat = CELL_TIMEOUT_S
    """Default wall-clock limit of one cell (seconds); the busy runtime is killed when it passes."""
    max_live_states: PositiveInt = 64
    """Most states kept as live processes; least-recently-used ones beyond are evicted (rebuilt by replay)."""
    max_memory_mb: PositiveFloat | None = None
    """Memory budget of this sandbox alone (its memory cgroup's usage less page cache, or else the summed USS of its
    live states); None: no per-sandbox cap (the process-wide one, ``shared_memory_budget``, still holds)."""
    shared_memory_budget: Flag = True
    """Join the process-wide memory budget (``sandbox.runtime.budget.process_budget``): when the live states of all the
    process's sandboxes together pass it, the least recently used idle state of any of them is evicted. Its size
    is ``$JUPITER_SANDBOX_MEMORY_MB`` or a third of the memory available when the first sandbox starts."""
    memory_limit_mb: Annotated[int, Field(strict=True, ge=256)] | None = 4096
    """RLIMIT_AS of each runtime process (address space, MiB)."""
    cpu_limit_s: _Cap = 3600
    """RLIMIT_CPU of each runtime process (CPU seconds over its life)."""
    max_processes: _Cap = 512
    """RLIMIT_NPROC (only enforced for a non-root user: see ``run_as_uid``)."""
    state_memory_mb: _Cap = 4096
    """Memory limit of one state as a whole (its processes, and the files its cells put in ``/tmp``,
    ``/dev/shm`` and the page cache), enforced by a memory cgroup per state where the host has one (root, cgroup
    v1 memory hierarchy); passing it is ``ExecStatus.MEMORY_LIMIT``. ``memory_limit_mb`` (address space) holds
    everywhere."""
    state_cgroups: Flag = True
    """A cgroup per state (pids, and v1 memory): what makes ``state_memory_mb`` hold and a timeout or close kill
    every process of the state. Moving a new state into its groups waits for one RCU grace period of the kernel
    (cgroup v1): about 14 ms per branch at load 15-36 on this VM, more at worst. False: no such wait, and neither
    guarantee (``Sandbox.guarantees`` says so)."""
    cpu_weight: Annotated[int, Field(strict=True, ge=1, le=10000)] | None = 100
    """CPU share of all the sandbox's cells together (cgroup ``cpu.weight`` scale: 100 = one ordinary process),
    where the host has a cpu cgroup: a cell with 64 processes gets no more CPU than one process of the search
    that runs it. None: no cpu group."""
    disk_quota_mb: _Cap = 8192
    """Disk quota of the sandbox: the sum of all its states' workspaces (MiB). Checked while a cell runs (every
    ``disk_check_s``) and after it; the cell that passes it ends with ``ExecStatus.DISK_LIMIT`` and its files are
    removed (the state comes back from its recorded cells)."""
    disk_check_s: PositiveFloat = 0.5
    """How often a running cell's workspace is measured for ``disk_quota_mb`` (seconds)."""
    max_file_size_mb: _Cap = 1024
    """RLIMIT_FSIZE: largest file a cell may write (MiB); bigger writes fail with an OSError in the cell."""
    tmp_size_mb: PositiveInt = 1024
    """Size of each state's private ``/tmp`` (a tmpfs; with bubblewrap). Its memory counts in the state's memory
    limit where a memory cgroup holds, and is given back when the state ends."""
    shm_size_mb: PositiveInt = 512
    """Size of each state's private ``/dev/shm`` (a tmpfs; with bubblewrap), counted like ``tmp_size_mb``."""
    max_output_chars: _Chars = 1_000_000
    """Output kept per cell (characters of text and rich data); the rest is dropped and counted (TRUNCATED)."""
    observation_chars: _Chars = 4000
    """Default length of :meth:`Execution.observation` text (head + tail are kept, the middle is cut)."""
    isolation: Isolation = Isolation.AUTO
    """Bubblewrap isolation: AUTO, BWRAP (fail if unavailable) or NONE."""
    run_as_uid: _Cap = 65534
    """When the host runs as root and bubblewrap is used, runtimes drop to this uid (so that RLIMIT_NPROC and
    file permissions apply). None keeps the host's uid."""
    readonly_paths: tuple[Path, ...] = ()
    """Host folders cells may read besides the system and the Python environment (with bubblewrap, nothing else
    of the host is visible; input files are copied in and need no entry here)."""
    kernel_name: Annotated[str, Field(min_length=1)] = "python3"
    """Jupyter kernel used by the KERNEL backend."""
    preload_modules: tuple[str, ...] = ("numpy", "pandas", "scipy.stats")
    """Modules imported once in the zygote so that every state shares their pages (best effort). scipy.stats is
    among them because data-analysis cells reach it often (tests, and pandas' Spearman/Kendall ``corr`` imports it
    lazily): imported in a fresh state it costs ~0.7 s of CPU every time, preloaded ~1 s once per sandbox."""
    root_dir: Path | None = None
    """Where workspaces live (a fresh temporary folder when None). Removed on close only when created here."""
    python: str = sys.executable
    """Python interpreter of the FORK runtime (needs IPython)."""
    startup_timeout_s: PositiveFloat = 120.0
    """Longest wait for a runtime or kernel to start and pass its ``1+1`` self-check."""
    huge_pages: Flag = True
    """Let the FORK runtime's malloc ask for transparent huge pages (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``).
    ``fork()`` copies the page tables of a state; with 4 KiB pages that costs about 50 µs per MiB of heap (most of
    a deep state's branch time), with 2 MiB pages almost nothing. Harmless where the kernel has THP off."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables a user passes to cells on purpose (a mapping or pairs; kept as sorted pairs).
    Cells get nothing else of the host's environment but an allow-list (``sandbox.runtime.base.HOST_ENV_ALLOWED``:
    PATH, LANG/LC_*, TZ, ...): the keys of model servers live in the host's environment."""
    nice: Annotated[int, Field(strict=True, ge=0, le=19)] = 0
    """Niceness added to the runtime (FORK: the state server, whose forked states inherit it; KERNEL: each
    kernel). A service sets it so that its API and its clients get the CPU before the cells do."""

    @field_validator("readonly_paths")
    @classmethod
    def _absolute(cls, paths: tuple[Path, ...]) -> tuple[Path, ...]:
        for path in paths:
            if not path.is_absolute():
                raise ValueError(f"{path} is not an absolute path")
        return paths

    @field_validator("env", mode="before")
    @classmethod
    def _env_pairs(cls, env: Any) -> Any:
        """A mapping or pairs become sorted pairs, each a shell name and a string without NUL."""
        try:
            pairs = tuple(sorted((k, v) for k, v in (env.items() if isinstance(env, Mapping) else env)))
        except (TypeError, ValueError):
            raise ValueError(f"must be a mapping of names to strings, got {env!r}") from None
        for key, value in pairs:
            if not (isinstance(key, str) and _ENV_NAME.match(key) and isinstance(value, str) and "\0" not in value):
                raise ValueError(f"{key!r}={value!r} is not a NAME=string pair")
        return pairs

    def rlimits(self) -> dict[str, int | None]:
        """The rlimits a runtime applies to itself, in the units ``setrlimit`` wants."""
        return {
            "as": None if self.memory_limit_mb is None else int(self.memory_limit_mb * _MB),
            "cpu": None if self.cpu_limit_s is None else int(self.cpu_limit_s),
            "nproc": None if self.max_processes is None else int(self.max_processes),
            "fsize": None if self.max_file_size_mb is None else int(self.max_file_size_mb * _MB),
        }

