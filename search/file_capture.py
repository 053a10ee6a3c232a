"""Keeping a named file of each node (DSBench: ``submission.csv``) while a search runs.

The driver releases a node's notebook state as soon as its children have branched, and every state when a
tree finishes, so an answer node's workspace is gone by the time the result is yielded. This wrapper sits
between the driver and the sandbox: after every cell it reads the submission file from that state's
workspace (files are part of the state, inherited on branch) and files the bytes under the cell's
``Execution`` object, which the driver keeps on the node (``node.execution``). The read happens on the
cell's own thread right after the cell, so it never races the driver's release of states (``_release`` /
``_expanded_states``): no driver hook is needed. An answer node's submission is then the one captured at its
nearest ancestor that ran a cell. Identical files are stored once.

A node *wrote* the file when, after its cell, the file differs from the one its nearest executed ancestor
left (or that ancestor had none): ``writer_nodes``. The paper scores every such executed node
(``submission_files`` returns them, and the answer nodes' inherited files); a cell killed by an
infrastructure failure (timeout, died, memory) is not counted, its file may be half written.

Used in-process by the DSBench runner and inside Ray tree workers (``capture_file``), which send these files
back with the tree (``TreeOutcome.files``), since the driver never sees the workers' sandboxes. In that
mapping a node that is not an answer is present exactly when it wrote the file.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterable
from typing import Any

__all__ = ["SubmissionCapture", "CapturingSandbox", "writer_nodes", "submission_files"]

log = logging.getLogger(__name__)


class SubmissionCapture:
    """Submission bytes by execution (thread-safe; shared by every tree of a run)."""

    def __init__(self, file_name: str = "submission.csv", max_bytes: int = 512 * 2**20) -> None:
        self.file_name = file_name
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._by_execution: dict[int, tuple[Any, str]] = {}  # id(execution) → (execution kept alive, digest)
        self._blobs: dict[str, bytes] = {}

    def record(self, execution: Any, state: Any) -> None:
        try:
            data = state.read_file(self.file_name)
        except (OSError, ValueError, RuntimeError):  # no file yet (or the state is gone): nothing to keep
            return
        if len(data) > self.max_bytes:
            log.warning("%s of %d bytes not kept (over %d)", self.file_name, len(data), self.max_bytes)
            return
        digest = hashlib.sha1(data).hexdigest()
        with self._lock:
            self._blobs.setdefault(digest, data)
            self._by_execution[id(execution)] = (execution, digest)

    def for_node(self, node: Any) -> bytes | None:
        """The submission file visible at ``node``: captured at it or its nearest ancestor with a cell."""
        digest = self._visible_digest(node)
        if digest is None:
            return None
        with self._lock:
            return self._blobs.get(digest)

    def wrote(self, node: Any) -> bool:
        """Whether ``node``'s own cell left a submission file that its nearest executed ancestor did not have
        (a new file, or different bytes). False for nodes without a cell of their own."""
        if node.execution is None:
            return False
        digest = self._visible_digest(node)
        if digest is None:
            return False
        return node.parent is None or self._visible_digest(node.parent) != digest

    def _digest_of(self, execution: Any) -> str | None:
        with self._lock:
            entry = self._by_execution.get(id(execution))
        return entry[1] if entry is not None and entry[0] is execution else None

    def _visible_digest(self, node: Any) -> str | None:
        current = node
        while current is not None:
            if current.execution is not None:
                return self._digest_of(current.execution)  # None: the latest cell on this path left no file
            current = current.parent
        return None

    def forget(self, nodes: Iterable[Any]) -> None:
        """Drop what was captured for ``nodes`` (a finished tree), freeing the memory."""
        with self._lock:
            for node in nodes:
                if node.execution is not None:
                    self._by_execution.pop(id(node.execution), None)
            live = {digest for _, digest in self._by_execution.values()}
            for digest in [d for d in self._blobs if d not in live]:
                del self._blobs[digest]


class _CapturingState:
    """A notebook state that reports its submission file after every cell (everything else passes through)."""

    def __init__(self, inner: Any, capture: SubmissionCapture) -> None:
        self._inner = inner
        self._capture = capture

    def run(self, code: str, timeout: float | None = None) -> Any:
        execution = self._inner.run(code, timeout=timeout)
        self._capture.record(execution, self._inner)
        return execution

    def branch(self) -> _CapturingState:
        return _CapturingState(self._inner.branch(), self._capture)

    def restore(self, cells: Any) -> _CapturingState:
        return _CapturingState(self._inner.restore(cells), self._capture)

    def close(self) -> None:  # declared, not forwarded: the search closes what has a close (search.protocols)
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class CapturingSandbox:
    """Wraps a sandbox so that its states capture submissions into ``capture``; closing closes the inner one."""

    def __init__(self, inner: Any, capture: SubmissionCapture) -> None:
        self._inner = inner
        self.capture = capture

    def open_root(self, input_files: Iterable[Any] = ()) -> _CapturingState:
        return _CapturingState(self._inner.open_root(input_files=list(input_files)), self.capture)

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def writer_nodes(capture: SubmissionCapture, nodes: Iterable[Any]) -> list[Any]:
    """The nodes among ``nodes`` whose own cell wrote the captured file (see the module docstring), in order;
    nodes ended by an infrastructure failure are left out."""
    return [n for n in nodes if not n.is_infrastructure_failure and capture.wrote(n)]


def submission_files(capture: SubmissionCapture, nodes: Iterable[Any]) -> dict[str, bytes]:
    """tag → file bytes for every node that wrote the file, and for every answer node the file visible at it.

    What a Ray worker sends back (``TreeOutcome.files``); the same bytes object is shared by all the nodes
    holding one file, so it is pickled once.
    """
    nodes = list(nodes)
    files: dict[str, bytes] = {}
    for node in writer_nodes(capture, nodes):
        blob = capture.for_node(node)
        if blob is not None:
            files[node.tag] = blob
    for node in nodes:
        if node.is_answer:
            blob = capture.for_node(node)
            if blob is not None:
                files[node.tag] = blob
    return files
