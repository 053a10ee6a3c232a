"""The server's settings: one frozen, validated value object built by ``jupiter serve``'s flags."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, model_validator

from jupiter.config_model import ConfigModel, PositiveFloat, PositiveInt
from jupiter.hosts import is_loopback

__all__ = ["ServeConfig", "ServeConfigError", "is_loopback"]


class ServeConfigError(ValueError):
    """A server setting is unusable; the message names the setting."""


def _long_enough(token: str) -> str:
    if len(token.strip()) < 8:
        raise ValueError("must be at least 8 characters")
    return token


_UserPath = Annotated[Path, AfterValidator(Path.expanduser)]


class ServeConfig(ConfigModel):
    """Settings of one ``jupiter serve`` process.

    ``data_root`` holds one folder per job (task.json, files/, output/); it defaults to ``jobs/`` beside the
    database. ``token`` is required when ``host`` is not loopback. Sizes are MB (10**6 bytes).
    """

    config_error = ServeConfigError

    llm: str = "default"
    value_model: _UserPath | None = None
    profile: str = "paper"
    host: str = "127.0.0.1"
    port: Annotated[int, Field(strict=True, ge=0, le=65535)] = 8700
    db: _UserPath = Path("jupiter-serve/jobs.sqlite")
    data_root: _UserPath | None = None
    max_trees: PositiveInt = 16
    token: Annotated[str, AfterValidator(_long_enough)] | None = None
    ray_address: str | None = None
    gc_days: PositiveFloat | None = None
    max_upload_mb: PositiveFloat = 100.0
    max_files: PositiveInt = 20
    max_queue: PositiveInt = 1000
    cell_timeout: PositiveFloat | None = None
    """Seconds per cell for every job (None: the profile's); not a per-job setting (it bounds server load)."""
    driver: Literal["process", "thread"] = "thread"
    """Where the trees run: ``thread`` (threads of the server's own process) or ``process`` (a child process
    that loads the policy: a crash of the model or the search does not take the API down). Ray mode ignores it
    (the trees run on Ray workers). docs/serve.md gives the measured difference."""
    nice: Annotated[int, Field(strict=True, ge=0, le=19)] = 10
    """Niceness added to the search: to the driver process and its sandboxes (``process``), or to the sandboxes
    the trees run their cells in (``thread``). The API gets the CPU first when the cells and the clients
    compete for it. 0 keeps the server's priority."""

    @model_validator(mode="after")
    def _jobs_beside_the_database_and_a_token_off_loopback(self) -> ServeConfig:
        if self.data_root is None:
            object.__setattr__(self, "data_root", self.db.parent / "jobs")  # frozen: filled once, here
        if not is_loopback(self.host) and not self.token:
            raise ValueError(f"host: {self.host} is not a loopback address; a token is required (--token or "
                             "--token-file) so that the API is not open to the network")
        return self

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1_000_000)
