"""Sandbox settings: one frozen, validated value object (errors name the bad field)."""
from __future__ import annotations

import enum
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Backend", "Isolation", "SandboxConfig", "ConfigError"]


class ConfigError(ValueError):
    """A SandboxConfig field has a bad value; the message names the field."""


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


@dataclass(frozen=True)
class SandboxConfig:
    """Settings of one :class:`sandbox.Sandbox`.

    Limits are per runtime process (a notebook state); ``None`` means "no limit" for the optional caps.
    """

    backend: Backend = Backend.FORK
    """FORK (default) or KERNEL; plain strings ``"fork"``/``"kernel"`` are accepted."""
    timeout_s: float = 180.0
    """Default wall-clock limit of one cell (seconds); the busy runtime is killed when it passes."""
    max_live_states: int = 64
    """Most states kept as live processes; least-recently-used ones beyond are evicted (rebuilt by replay)."""
    max_memory_mb: float | None = None
    """Memory budget of this sandbox alone (its memory cgroup's usage less page cache, or else the summed USS of its
    live states); None: no per-sandbox cap (the process-wide one, ``shared_memory_budget``, still holds)."""
    shared_memory_budget: bool = True
    """Join the process-wide memory budget (``sandbox.runtime.budget.process_budget``): when the live states of all the
    process's sandboxes together pass it, the least recently used idle state of any of them is evicted. Its size
    is ``$JUPITER_SANDBOX_MEMORY_MB`` or a third of the memory available when the first sandbox starts."""
    memory_limit_mb: int | None = 4096
    """RLIMIT_AS of each runtime process (address space, MiB)."""
    cpu_limit_s: int | None = 3600
    """RLIMIT_CPU of each runtime process (CPU seconds over its life)."""
    max_processes: int | None = 512
    """RLIMIT_NPROC (only enforced for a non-root user: see ``run_as_uid``)."""
    state_memory_mb: int | None = 4096
    """Memory limit of one state as a whole (its processes, and the files its cells put in ``/tmp``,
    ``/dev/shm`` and the page cache), enforced by a memory cgroup per state where the host has one (root, cgroup
    v1 memory hierarchy); passing it is ``ExecStatus.MEMORY_LIMIT``. ``memory_limit_mb`` (address space) holds
    everywhere."""
    state_cgroups: bool = True
    """A cgroup per state (pids, and v1 memory): what makes ``state_memory_mb`` hold and a timeout or close kill
    every process of the state. Moving a new state into its groups waits for one RCU grace period of the kernel
    (cgroup v1): about 14 ms per branch at load 15-36 on this VM, more at worst. False: no such wait, and neither
    guarantee (``Sandbox.guarantees`` says so)."""
    cpu_weight: int | None = 100
    """CPU share of all the sandbox's cells together (cgroup ``cpu.weight`` scale: 100 = one ordinary process),
    where the host has a cpu cgroup: a cell with 64 processes gets no more CPU than one process of the search
    that runs it. None: no cpu group."""
    disk_quota_mb: int | None = 8192
    """Disk quota of the sandbox: the sum of all its states' workspaces (MiB). Checked while a cell runs (every
    ``disk_check_s``) and after it; the cell that passes it ends with ``ExecStatus.DISK_LIMIT`` and its files are
    removed (the state comes back from its recorded cells)."""
    disk_check_s: float = 0.5
    """How often a running cell's workspace is measured for ``disk_quota_mb`` (seconds)."""
    max_file_size_mb: int | None = 1024
    """RLIMIT_FSIZE: largest file a cell may write (MiB); bigger writes fail with an OSError in the cell."""
    tmp_size_mb: int = 1024
    """Size of each state's private ``/tmp`` (a tmpfs; with bubblewrap). Its memory counts in the state's memory
    limit where a memory cgroup holds, and is given back when the state ends."""
    shm_size_mb: int = 512
    """Size of each state's private ``/dev/shm`` (a tmpfs; with bubblewrap), counted like ``tmp_size_mb``."""
    max_output_chars: int = 1_000_000
    """Output kept per cell (characters of text and rich data); the rest is dropped and counted (TRUNCATED)."""
    observation_chars: int = 4000
    """Default length of :meth:`Execution.observation` text (head + tail are kept, the middle is cut)."""
    isolation: Isolation = Isolation.AUTO
    """Bubblewrap isolation: AUTO, BWRAP (fail if unavailable) or NONE."""
    run_as_uid: int | None = 65534
    """When the host runs as root and bubblewrap is used, runtimes drop to this uid (so that RLIMIT_NPROC and
    file permissions apply). None keeps the host's uid."""
    readonly_paths: tuple[Path, ...] = ()
    """Host folders cells may read besides the system and the Python environment (with bubblewrap, nothing else
    of the host is visible; input files are copied in and need no entry here)."""
    kernel_name: str = "python3"
    """Jupyter kernel used by the KERNEL backend."""
    preload_modules: tuple[str, ...] = ("numpy", "pandas", "scipy.stats")
    """Modules imported once in the zygote so that every state shares their pages (best effort). scipy.stats is
    among them because data-analysis cells reach it often (tests, and pandas' Spearman/Kendall ``corr`` imports it
    lazily): imported in a fresh state it costs ~0.7 s of CPU every time, preloaded ~1 s once per sandbox."""
    root_dir: Path | None = None
    """Where workspaces live (a fresh temporary folder when None). Removed on close only when created here."""
    python: str = field(default=sys.executable)
    """Python interpreter of the FORK runtime (needs IPython)."""
    startup_timeout_s: float = 120.0
    """Longest wait for a runtime or kernel to start and pass its ``1+1`` self-check."""
    huge_pages: bool = True
    """Let the FORK runtime's malloc ask for transparent huge pages (``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``).
    ``fork()`` copies the page tables of a state; with 4 KiB pages that costs about 50 µs per MiB of heap (most of
    a deep state's branch time), with 2 MiB pages almost nothing. Harmless where the kernel has THP off."""
    env: Mapping[str, str] | tuple[tuple[str, str], ...] = ()
    """Environment variables a user passes to cells on purpose (a mapping or pairs; kept as sorted pairs).
    Cells get nothing else of the host's environment but an allow-list (``sandbox.runtime.base.HOST_ENV_ALLOWED``:
    PATH, LANG/LC_*, TZ, ...): the keys of model servers live in the host's environment."""
    nice: int = 0
    """Niceness added to the runtime (FORK: the state server, whose forked states inherit it; KERNEL: each
    kernel). A service sets it so that its API and its clients get the CPU before the cells do."""

    def __post_init__(self) -> None:
        def fail(name: str, why: str) -> None:
            raise ConfigError(f"SandboxConfig.{name}: {why} (got {getattr(self, name)!r})")

        for name, enum_type in (("backend", Backend), ("isolation", Isolation)):
            value = getattr(self, name)
            try:
                object.__setattr__(self, name, enum_type(value))
            except ValueError:
                fail(name, f"must be one of {[m.value for m in enum_type]}")
        for name in ("timeout_s", "disk_check_s", "startup_timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and value > 0):
                fail(name, "must be a positive number of seconds")
        if not (isinstance(self.max_live_states, int) and self.max_live_states >= 1):
            fail("max_live_states", "must be an integer >= 1")
        if self.cpu_weight is not None and not (isinstance(self.cpu_weight, int) and 1 <= self.cpu_weight <= 10000):
            fail("cpu_weight", "must be an integer 1..10000 or None")
        for name in ("max_memory_mb", "memory_limit_mb", "cpu_limit_s", "max_processes", "max_file_size_mb",
                     "state_memory_mb", "disk_quota_mb"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                fail(name, "must be positive or None")
        if self.memory_limit_mb is not None and self.memory_limit_mb < 256:
            fail("memory_limit_mb", "must be at least 256 MiB (Python and IPython need it to start)")
        for name in ("tmp_size_mb", "shm_size_mb"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                fail(name, "must be a whole number of MiB >= 1")
        for name in ("max_output_chars", "observation_chars"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 100):
                fail(name, "must be an integer >= 100")
        if self.run_as_uid is not None and not (isinstance(self.run_as_uid, int) and self.run_as_uid > 0):
            fail("run_as_uid", "must be a positive uid or None")
        if not (isinstance(self.kernel_name, str) and self.kernel_name):
            fail("kernel_name", "must be a non-empty kernel name")
        if isinstance(self.preload_modules, str) or not all(isinstance(m, str) for m in self.preload_modules):
            fail("preload_modules", "must be a tuple of module names")
        object.__setattr__(self, "preload_modules", tuple(self.preload_modules))
        if isinstance(self.readonly_paths, (str, Path)):
            fail("readonly_paths", "must be a tuple of paths")
        object.__setattr__(self, "readonly_paths", tuple(Path(p) for p in self.readonly_paths))
        for path in self.readonly_paths:
            if not path.is_absolute():
                fail("readonly_paths", f"{path} is not an absolute path")
        if self.root_dir is not None:
            object.__setattr__(self, "root_dir", Path(self.root_dir))
        for name in ("state_cgroups", "shared_memory_budget", "huge_pages"):
            if not isinstance(getattr(self, name), bool):
                fail(name, "must be True or False")
        env = self.env.items() if isinstance(self.env, Mapping) else self.env
        try:
            pairs = tuple(sorted((k, v) for k, v in env))
        except (TypeError, ValueError):
            fail("env", "must be a mapping of names to strings")
        for key, value in pairs:
            if not (isinstance(key, str) and _ENV_NAME.match(key) and isinstance(value, str) and "\0" not in value):
                fail("env", f"{key!r}={value!r} is not a NAME=string pair")
        object.__setattr__(self, "env", pairs)
        if not (isinstance(self.nice, int) and not isinstance(self.nice, bool) and 0 <= self.nice <= 19):
            fail("nice", "must be an integer 0..19")

    def rlimits(self) -> dict[str, int | None]:
        """The rlimits a runtime applies to itself, in the units ``setrlimit`` wants."""
        return {
            "as": None if self.memory_limit_mb is None else int(self.memory_limit_mb * _MB),
            "cpu": None if self.cpu_limit_s is None else int(self.cpu_limit_s),
            "nproc": None if self.max_processes is None else int(self.max_processes),
            "fsize": None if self.max_file_size_mb is None else int(self.max_file_size_mb * _MB),
        }
