"""The result of running one cell: typed status, nbformat outputs, timing (E2B-style ``Execution``)."""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from sandbox.observation import render_observation

__all__ = ["ExecStatus", "ExecError", "Execution"]


class ExecStatus(str, enum.Enum):
    """One status per execution, so that infrastructure failures are never mistaken for model failures.

    OK: the cell ran. ERROR: the cell raised (data for the model). TRUNCATED: it ran but printed more than the
    output cap (the excess was dropped). TIMEOUT / MEMORY_LIMIT / DIED / DISK_LIMIT (the sandbox's workspaces passed
    ``SandboxConfig.disk_quota_mb``): the runtime was stopped or lost — the sandbox's fault or limit, not an answer
    about the data.
    """

    OK = "ok"
    ERROR = "error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    DIED = "died"
    TRUNCATED = "truncated"
    DISK_LIMIT = "disk_limit"

    @property
    def is_infrastructure(self) -> bool:
        return self in (ExecStatus.TIMEOUT, ExecStatus.MEMORY_LIMIT, ExecStatus.DIED, ExecStatus.DISK_LIMIT)


@dataclass(frozen=True)
class ExecError:
    """The exception a cell raised (or the infrastructure failure, named like one)."""

    ename: str
    evalue: str
    traceback: tuple[str, ...] = ()


@dataclass(frozen=True)
class Execution:
    """One cell run.

    ``outputs`` are nbformat v4 output dicts (stream, execute_result, display_data, error) in order;
    infrastructure failures also appear there as an ``error`` output, so that exported notebooks show them.
    """

    code: str
    status: ExecStatus
    outputs: tuple[dict[str, Any], ...]
    duration_s: float
    execution_count: int | None = None
    error: ExecError | None = None
    dropped_chars: int = 0
    generation: int | None = None
    observation_chars: int = 4000

    @property
    def ok(self) -> bool:
        return self.status in (ExecStatus.OK, ExecStatus.TRUNCATED)

    def text(self, stream: str) -> str:
        """All text of one stream (``"stdout"`` or ``"stderr"``)."""
        return "".join(o["text"] for o in self.outputs if o["output_type"] == "stream" and o["name"] == stream)

    @property
    def stdout(self) -> str:
        return self.text("stdout")

    @property
    def stderr(self) -> str:
        return self.text("stderr")

    @property
    def result(self) -> str | None:
        """``text/plain`` of the last expression's value, if the cell displayed one."""
        for out in self.outputs:
            if out["output_type"] == "execute_result":
                return _plain(out["data"])
        return None

    def observation(self, max_chars: int | None = None) -> str:
        """The text the model reads: stdout, stderr, results, ``ename: evalue`` with a short traceback.

        Longer text is cut in the middle (head and tail kept) with a marker saying how much was cut.
        """
        return render_observation(self.outputs, max_chars or self.observation_chars, self.dropped_chars)


def _plain(data: dict[str, Any]) -> str:
    text = data.get("text/plain", "")
    return "".join(text) if isinstance(text, list) else str(text)

