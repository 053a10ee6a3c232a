"""``State``: a handle on one notebook state (a node of the search tree). It owns no process itself — the
Sandbox decides whether its state is a live runtime or an evicted record to be rebuilt by replay."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from sandbox.execution import Execution
from sandbox.workspace import read_state_file

if TYPE_CHECKING:
    from sandbox.sandbox import Sandbox

__all__ = ["State", "CellRecord", "StateClosedError"]


class StateClosedError(RuntimeError):
    """The state was closed (or its sandbox was)."""


@dataclass(frozen=True)
class CellRecord:
    """One recorded cell of a state's path: what a replay runs again. ``uid`` tells apart two runs of the same
    code, so that a snapshot is reused only when its history is exactly a prefix of the target's."""

    uid: int
    code: str


class State:
    """A notebook state: namespace + working directory. Obtain from ``Sandbox.open_root`` or ``State.branch``.

    ``run`` mutates this state; to try a cell without touching it, ``branch()`` first. One thread at a time per
    state; different states may be used from different threads.
    """

    def __init__(self, sandbox: "Sandbox", sid: int, workspace: Path, history: tuple[CellRecord, ...],
                 parent: "State | None", root_info: Any) -> None:
        self._sandbox = sandbox
        self.id = sid
        self._workspace = workspace
        self._history = history
        self.parent = parent
        self._root_info = root_info
        self._runtime: Any = None
        self._generation: int | None = None
        self._lock = threading.RLock()
        self._closed = False
        self._last_used = 0.0

    # ---- public API ---------------------------------------------------------------------------------------
    def run(self, code: str, timeout: float | None = None) -> Execution:
        """Run ``code`` as the next cell of this state; ``timeout`` in seconds (default: config.timeout_s).

        Cell errors come back as ``ExecStatus.ERROR`` (data). On TIMEOUT / MEMORY_LIMIT / DIED the runtime is
        discarded and the failed cell is not recorded: the next use rebuilds the state from its recorded cells
        (new ``generation``).
        """
        return self._sandbox._run(self, code, timeout)

    def branch(self) -> "State":
        """An independent child state: a copy of this namespace and of this working directory."""
        return self._sandbox._branch(self)

    def restore(self, cells: "Sequence[str]") -> "State":
        """A descendant of this state that ran ``cells`` after it, built lazily: nothing runs now; its first
        ``run`` or ``branch`` replays the cells in a fork of this state (or of the nearest live ancestor).

        Why: a search whose process died saved its tree but not its live states; resuming it needs a state for
        every leaf still to expand, and most are never expanded again, so only those that are pay the replay.
        """
        return self._sandbox._restore(self, tuple(cells))

    def read_file(self, name: str) -> bytes:
        """Bytes of a file in this state's working directory (e.g. ``submission.csv``)."""
        self._check_open()
        info = self._root_info
        return read_state_file(self._workspace, name, getattr(info, "inputs_dir", None))

    def close(self) -> None:
        """Release the runtime and the working directory of this state. Children are not affected."""
        self._sandbox._close_state(self)

    # ---- read-only views ------------------------------------------------------------------------------------
    @property
    def workspace(self) -> Path:
        """This state's working directory (cells run with it as cwd)."""
        return self._workspace

    @property
    def generation(self) -> int | None:
        """Id of the process incarnation holding this state; changes when the state is rebuilt or respawned."""
        return self._generation

    @property
    def cells(self) -> tuple[str, ...]:
        """Recorded code of the path from the root to this state (cells that completed, in order)."""
        return tuple(record.code for record in self._history)

    @property
    def depth(self) -> int:
        return len(self._history)

    @property
    def live(self) -> bool:
        """Whether the state is held by a live runtime now (False: evicted or failed; rebuilt on next use)."""
        return self._runtime is not None and not self._closed

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise StateClosedError(f"state {self.id} is closed")

    def __repr__(self) -> str:
        return (f"State(id={self.id}, depth={self.depth}, generation={self._generation}, "
                f"live={self.live}, closed={self._closed})")
