"""The server's settings: one frozen, validated value object built by ``jupiter serve``'s flags."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jupiter.hosts import is_loopback

__all__ = ["ServeConfig", "ServeConfigError", "is_loopback"]


class ServeConfigError(ValueError):
    """A server setting is unusable; the message names the setting."""


@dataclass(frozen=True)
class ServeConfig:
    """Settings of one ``jupiter serve`` process.

    ``data_root`` holds one folder per job (task.json, files/, output/); it defaults to ``jobs/`` beside the
    database. ``token`` is required when ``host`` is not loopback. Sizes are MB (10**6 bytes).
    """

    llm: str = "default"
    value_model: Path | None = None
    profile: str = "paper"
    host: str = "127.0.0.1"
    port: int = 8700
    db: Path = Path("jupiter-serve/jobs.sqlite")
    data_root: Path | None = None
    max_trees: int = 16
    token: str | None = None
    ray_address: str | None = None
    gc_days: float | None = None
    max_upload_mb: float = 100.0
    max_files: int = 20
    max_queue: int = 1000
    cell_timeout: float | None = None
    """Seconds per cell for every job (None: the profile's); not a per-job setting (it bounds server load)."""
    driver: str = "thread"
    """Where the trees run: ``thread`` (threads of the server's own process) or ``process`` (a child process
    that loads the policy: a crash of the model or the search does not take the API down). Ray mode ignores it
    (the trees run on Ray workers). docs/serve.md gives the measured difference."""
    nice: int = 10
    """Niceness added to the search: to the driver process and its sandboxes (``process``), or to the sandboxes
    the trees run their cells in (``thread``). The API gets the CPU first when the cells and the clients
    compete for it. 0 keeps the server's priority."""

    def __post_init__(self) -> None:
        def fail(name: str, why: str) -> None:
            raise ServeConfigError(f"{name}: {why} (got {getattr(self, name)!r})")

        object.__setattr__(self, "db", Path(self.db).expanduser())
        if self.data_root is None:
            object.__setattr__(self, "data_root", self.db.parent / "jobs")
        object.__setattr__(self, "data_root", Path(self.data_root).expanduser())  # type: ignore[arg-type]
        if self.value_model is not None:
            object.__setattr__(self, "value_model", Path(self.value_model).expanduser())
        if not (isinstance(self.port, int) and 0 <= self.port < 65536):
            fail("port", "must be 0..65535")
        for name in ("max_trees", "max_files", "max_queue"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 1):
                fail(name, "must be an integer >= 1")
        if not self.max_upload_mb > 0:
            fail("max_upload_mb", "must be positive")
        if self.gc_days is not None and not self.gc_days > 0:
            fail("gc_days", "must be a positive number of days")
        if self.cell_timeout is not None and not self.cell_timeout > 0:
            fail("cell_timeout", "must be a positive number of seconds")
        if self.driver not in ("process", "thread"):
            fail("driver", "must be 'process' or 'thread'")
        if not (isinstance(self.nice, int) and 0 <= self.nice <= 19):
            fail("nice", "must be an integer 0..19")
        if self.token is not None and len(self.token.strip()) < 8:
            fail("token", "must be at least 8 characters")
        if not is_loopback(self.host) and not self.token:
            raise ServeConfigError(f"host: {self.host} is not a loopback address; a token is required "
                                   "(--token or --token-file) so that the API is not open to the network")

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1_000_000)
