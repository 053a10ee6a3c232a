"""``State``: a handle on one notebook state (a node of the search tree). It owns no process itself: its Sandbox
keeps what the state is (a ``StateSlot``: its folder, its recorded cells, its runtime while live) and decides
whether that is a live runtime or an evicted record to be rebuilt by replay."""
from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sandbox.execution import Execution
from sandbox.runtime.base import Runtime
from sandbox.runtime.workspace import read_state_file

if TYPE_CHECKING:
    from sandbox.sandbox import Sandbox

__all__ = ["CellRecord", "RootInfo", "State", "StateClosedError", "StateSlot"]


class StateClosedError(RuntimeError):
    """The state was closed (or its sandbox was)."""


@dataclass(frozen=True)
class CellRecord:
    """One recorded cell of a state's path: what a replay runs again. ``uid`` tells apart two runs of the same
    code, so that a snapshot is reused only when its history is exactly a prefix of the target's."""

    uid: int
    code: str


@dataclass(frozen=True)
class RootInfo:
    """The inputs of a root state, shared by all its descendants: the read-only folder of copies and their names
    (each state's folder links to them)."""

    inputs_dir: Path
    input_names: tuple[str, ...]


@dataclass(eq=False)
class StateSlot:
    """What a Sandbox keeps about one of its states. Only the Sandbox writes it, holding ``lock`` (one thread at a
    time per state); the ``State`` handle reads it for its views. Compared by identity."""

    sid: int
    workspace: Path
    history: tuple[CellRecord, ...]
    parent: StateSlot | None
    root: RootInfo
    runtime: Runtime | None = None  # None: evicted, failed or not built yet (rebuilt by replay on next use)
    generation: int | None = None
    closed: bool = False
    last_used: float = 0.0  # time.monotonic() of its last use (least recently used states are evicted first)
    lock: threading.RLock = field(default_factory=threading.RLock)
    # branches started ahead of need (``State.prefetch``), oldest first; read and written under the Sandbox's lock
    ahead: list[Future[State]] = field(default_factory=list)


class State:
    """A notebook state: namespace + working directory. Obtain from ``Sandbox.open_root`` or ``State.branch``.

    ``run`` mutates this state; to try a cell without touching it, ``branch()`` first. One thread at a time per
    state; different states may be used from different threads.
    """

    def __init__(self, sandbox: Sandbox, slot: StateSlot, parent: State | None) -> None:
        """Made by the Sandbox only (``open_root``, ``branch``, ``restore``)."""
        self._sandbox = sandbox
        self._slot = slot
        self.id = slot.sid
        self.parent = parent

    # ---- public API ---------------------------------------------------------------------------------------
    def run(self, code: str, timeout: float | None = None) -> Execution:
        """Run ``code`` as the next cell of this state; ``timeout`` in seconds (default: config.timeout_s).

        Cell errors come back as ``ExecStatus.ERROR`` (data). On TIMEOUT / MEMORY_LIMIT / DIED the runtime is
        discarded and the failed cell is not recorded: the next use rebuilds the state from its recorded cells
        (new ``generation``).
        """
        return self._sandbox.run(self, code, timeout)

    def branch(self) -> State:
        """An independent child state: a copy of this namespace and of this working directory."""
        return self._sandbox.branch(self)

    def prefetch(self, n: int) -> None:
        """Start branching this state in the background until ``n`` branches are ready or on their way; the next
        ``branch()`` calls take them (oldest first) instead of forking then.

        Why: a search knows which state it will branch K times as soon as it asks the policy for K cells. Forked
        while the policy generates, the new states' fork, isolation set-up and workspace copy are off the path
        from the policy's reply to the cells' results. ``run`` and ``close`` discard the branches not taken
        (closed once they are made): they hold the state as it was.
        """
        self._sandbox.prefetch(self, n)

    def restore(self, cells: Sequence[str]) -> State:
        """A descendant of this state that ran ``cells`` after it, built lazily: nothing runs now; its first
        ``run`` or ``branch`` replays the cells in a fork of this state (or of the nearest live ancestor).

        Why: a search whose process died saved its tree but not its live states; resuming it needs a state for
        every leaf still to expand, and most are never expanded again, so only those that are pay the replay.
        """
        return self._sandbox.restore(self, cells)

    def read_file(self, name: str) -> bytes:
        """Bytes of a file in this state's working directory (e.g. ``submission.csv``)."""
        if self._slot.closed:
            raise StateClosedError(f"state {self.id} is closed")
        return read_state_file(self._slot.workspace, name, self._slot.root.inputs_dir)

    def close(self) -> None:
        """Release the runtime and the working directory of this state. Children are not affected."""
        self._sandbox.close_state(self)

    # ---- read-only views ------------------------------------------------------------------------------------
    @property
    def workspace(self) -> Path:
        """This state's working directory (cells run with it as cwd)."""
        return self._slot.workspace

    @property
    def generation(self) -> int | None:
        """Id of the process incarnation holding this state; changes when the state is rebuilt or respawned."""
        return self._slot.generation

    @property
    def runtime_pid(self) -> int | None:
        """Host pid of the process holding this state now; None while it is not live (evicted, failed, closed)
        or when the backend does not know it. For measurements (CPU, memory of the process); changes with
        ``generation``."""
        runtime = self._slot.runtime
        return None if runtime is None or self._slot.closed else runtime.pid

    @property
    def cells(self) -> tuple[str, ...]:
        """Recorded code of the path from the root to this state (cells that completed, in order)."""
        return tuple(record.code for record in self._slot.history)

    @property
    def depth(self) -> int:
        """Number of recorded cells from the root to this state."""
        return len(self._slot.history)

    @property
    def live(self) -> bool:
        """Whether the state is held by a live runtime now (False: evicted or failed; rebuilt on next use)."""
        return self._slot.runtime is not None and not self._slot.closed

    @property
    def closed(self) -> bool:
        return self._slot.closed

    def __repr__(self) -> str:
        return (f"State(id={self.id}, depth={self.depth}, generation={self.generation}, "
                f"live={self.live}, closed={self.closed})")
