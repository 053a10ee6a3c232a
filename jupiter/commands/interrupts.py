"""Ctrl-C and SIGTERM during a long command: the first asks for a clean stop, the second stops at once.

Why: a search holds work worth keeping (the tree so far, the best answer so far). The first SIGINT or SIGTERM
only sets a flag that the search driver reads before every step (its ``stop`` hook), so the tree ends after
the step in progress and the command writes what exists. A second signal raises ``KeyboardInterrupt`` in the
main thread; the driver turns that into interrupted results too (dropping the unfinished step). While the
command is writing its files, further signals are noted but do not cut the writing short.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from jupiter.console_log import EXIT_INTERRUPTED

__all__ = ["StopSignals", "EXIT_INTERRUPTED"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _say(line: str) -> None:
    """Write ``line`` to stderr's file descriptor with one ``os.write``, from inside a signal handler.

    Why not ``print``: the handler runs in the main thread, possibly in the middle of a write to the same
    buffered stream (the progress bar's), and writing to it again from there raises "reentrant call inside
    BufferedWriter". ``sys.stderr.fileno()`` is the console even while ``console_log`` captures (its router
    answers with the console's descriptor); a stream without a descriptor (a test's) gets a plain write.
    """
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        print(line, file=sys.stderr, flush=True)
        return
    with contextlib.suppress(OSError):
        os.write(fd, (line + "\n").encode(errors="replace"))


class StopSignals:
    """A context manager that installs the two-step handler for SIGINT and SIGTERM (main thread only).

    ``stop(task_id)`` is the driver's ``stop`` hook; ``received`` names the signals seen; set ``writing``
    while files are written so that a further signal cannot leave them half-written. ``at_once`` (if set) is
    called on the second signal, just before the ``KeyboardInterrupt``: a cell that is running cannot be
    interrupted by it, so the caller uses this to end the cells' processes (their step is dropped anyway).
    """

    def __init__(self, what: str = "the search", echo: Callable[[str], Any] | None = None) -> None:
        self.what = what
        self.received: list[str] = []
        self.writing = False
        self._echo = echo or _say
        self._previous: dict[int, Any] = {}
        self.at_once: Callable[[], Any] | None = None

    @property
    def requested(self) -> bool:
        """A stop was asked for (at least one signal arrived)."""
        return bool(self.received)

    def stop(self, task_id: str) -> bool:  # the driver's ``stop`` hook; the same answer for every tree
        return self.requested

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        self.received.append(name)
        if self.writing:
            self._echo(f"jupiter: {name}: writing the outputs, one moment")
            return
        if len(self.received) == 1:
            self._echo(f"jupiter: {name}: stopping {self.what} after the current step and saving what exists; "
                       "press Ctrl-C again to stop at once")
            return
        if self.at_once is not None:
            self.at_once()
        raise KeyboardInterrupt

    def __enter__(self) -> StopSignals:
        if threading.current_thread() is threading.main_thread():  # signal.signal works only there
            for sig in _SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
