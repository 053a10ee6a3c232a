"""Keep a command's console to the project's own lines; everything other programs print goes to a log file.

Why: loading the policy on vLLM's CPU build prints pages that a user can do nothing about (tcmalloc and NUMA
hints, Triton, FutureWarnings of libraries, progress bars of model conversion) around the three lines that
matter. While ``capture`` runs:

- file descriptors 1 and 2 point to the log file, so output written below Python (C extensions, child
  processes such as compilers or Ray workers) lands there;
- ``sys.stdout`` and ``sys.stderr`` become routers: text written by code of this project (print, its progress
  bars) goes to the terminal, text written by other libraries (their print, tqdm bars, warnings, their own log
  handlers) to the log file. The writer is the nearest frame on the call stack outside the modules that only
  carry text (the standard library, tqdm, stream wrappers such as colorama, Ray's replacement of ``print``),
  which is how a bar the project opened stays on the console while a library's bar does not;
- logging: records of this project at WARNING and above, and every record at ERROR and above whoever logs it,
  reach the console; the log file gets every record at INFO and above.

A real error is never hidden: ERROR records of any library reach the console, even through a library's own
handler; an unexpected failure (an exception the command did not turn into a message) prints the log file's
last lines and its path; fatal crashes (``faulthandler``) print to the console. A failure the command explained
itself (exit code 2 or more) stays one line, plus one line saying where the log is: the log's tail would be
noise there (a refused connection's retry warnings, say). ``jupiter -v`` does not capture at all.

A stream a library kept while the capture ran (Ray's colorama keeps ``sys.stdout`` for its exit hook) still
works afterwards: the routers then write to the streams the command started with.

At the end the log file moves into the run folder the command named (``log_to``) as ``jupiter.log``; until then
it lives in the temporary folder, so a run folder is never created or changed before the command writes it.
"""

from __future__ import annotations

import contextlib
import faulthandler
import io
import logging
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

__all__ = ["LOG_NAME", "OWN_PACKAGES", "EXIT_INTERRUPTED", "Capture", "capture", "log_to", "log_path"]

LOG_NAME = "jupiter.log"

#: top-level modules whose output is the project's own (``__main__``: ``python -m jupiter.cli`` and the
#: console script)
OWN_PACKAGES = frozenset({"jupiter", "search", "sandbox", "value_model", "nbqa_pipeline", "benchmarks", "__main__"})

#: top-level modules that only carry text from the real writer (skipped when looking for who wrote it)
_CARRIERS = frozenset(sys.stdlib_module_names) | {"tqdm", "colorama"}
#: single modules that do the same: Ray's driver replaces ``builtins.print`` with this module's ``safe_print``
_CARRIER_MODULES = frozenset({"ray.experimental.tqdm_ray"})

#: lines of the log shown on the console when a command fails
TAIL_LINES = 30

_FORMAT = "%(levelname)s %(name)s: %(message)s"


def _writer_is_ours(frame: types.FrameType | None) -> bool:
    """Whether text written from ``frame`` (the caller of ``write``) belongs on the console.

    The nearest frame outside the carriers decides. A library's own log handler passes through ``logging``:
    a record at ERROR or above goes to the console whoever logged it. No deciding frame: the console.
    """
    while frame is not None:
        module = str(frame.f_globals.get("__name__", ""))
        top = module.split(".", 1)[0]
        if top not in _CARRIERS and module not in _CARRIER_MODULES:
            return top in OWN_PACKAGES
        if top == "logging" and frame.f_code.co_name == "emit":
            record = frame.f_locals.get("record")
            if isinstance(record, logging.LogRecord) and record.levelno >= logging.ERROR:
                return True
        frame = frame.f_back
    return True


class _Router(io.TextIOBase):
    """A text stream that sends the project's writes to ``console`` and every other writer's to ``log``."""

    def __init__(self, console: TextIO, log: TextIO) -> None:
        super().__init__()
        self.console = console
        self.log = log

    def release(self, stream: TextIO) -> None:
        """After the capture: everything goes to ``stream`` (for a library that kept this router)."""
        self.console = self.log = stream

    def write(self, text: str) -> int:
        target = self.console if _writer_is_ours(sys._getframe(1)) else self.log
        target.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in (self.console, self.log):
            with contextlib.suppress(ValueError, OSError):
                stream.flush()

    def fileno(self) -> int:
        return self.console.fileno()

    def isatty(self) -> bool:
        """False once the stream it was released to is closed: a library that kept the router (Ray's colorama
        wrapper asks at exit) gets an answer, not a ValueError traceback."""
        try:
            return self.console.isatty()
        except ValueError:
            return False

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.console, "encoding", None) or "utf-8"

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return getattr(self.console, "errors", None)

    @property
    def buffer(self) -> io.BufferedIOBase:
        return self.console.buffer  # type: ignore[attr-defined]


class _ConsoleFilter(logging.Filter):
    """The project's records at WARNING and above, anyone's at ERROR and above."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        return record.levelno >= logging.WARNING and record.name.split(".", 1)[0] in OWN_PACKAGES


#: exit code of an interrupted command (not a failure: no log tail is shown): the shell's code for "ended by
#: SIGINT" (128 + 2); used after SIGTERM too, once the outputs are written
EXIT_INTERRUPTED = 130


@dataclass
class Capture:
    """One capture: where the log is, the run folder it moves into, and the command's exit code.

    The command sets ``exit_code`` (``cli.main`` does): 2 or more, except 130 (interrupted), is a failure the
    command explained in its one error line (the log's tail is for unexpected failures).
    """

    path: Path
    folder: Path | None = None
    exit_code: int = 0

    @property
    def failed(self) -> bool:
        return self.exit_code >= 2 and self.exit_code != EXIT_INTERRUPTED


_active: Capture | None = None


def log_to(folder: str | Path) -> None:
    """Name the run folder the log file moves into when the command ends (no effect when nothing is captured).

    The move happens only if the folder exists then: a command that fails before writing its folder leaves
    the log in the temporary folder and says where.
    """
    if _active is not None:
        _active.folder = Path(folder)


def log_path() -> Path | None:
    """Where other programs' output will be when the command ends (None: nothing is captured).

    For a command's own failure line: a backend that died said why in its own words, and those are in the log.
    """
    if _active is None:
        return None
    if _active.folder is not None:
        return _active.folder / LOG_NAME
    return _active.path


def _console_stream(stream: TextIO, fd: int) -> tuple[TextIO, bool]:
    """A stream to what ``stream`` shows now, independent of file descriptor ``fd`` (which is about to move).

    Returns (stream, whether we opened it). A stream that is not on ``fd`` (a test's capture) is used as is.
    """
    try:
        on_fd = stream.fileno() == fd
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        on_fd = False
    if not on_fd:
        return stream, False
    stream.flush()
    return open(os.dup(fd), "w", buffering=1, encoding=stream.encoding or "utf-8",  # the caller closes it
                errors=stream.errors or "strict"), True


@contextlib.contextmanager
def capture(folder: str | Path | None = None) -> Iterator[Capture]:
    """Route other programs' output to a log file while the block runs.

    ``folder``: the run folder to move the log into at the end (``log_to`` may name it later). Replaces the
    root logger's handlers for the block; restores streams, descriptors and logging on the way out, then moves
    the log (``_finish``). An exception other than KeyboardInterrupt shows the log's last lines; a failing
    ``exit_code`` shows where the log is.
    """
    global _active
    handle, name = tempfile.mkstemp(prefix="jupiter-", suffix=".log")
    os.close(handle)
    state = Capture(Path(name), Path(folder) if folder is not None else None)
    log = open(state.path, "a", buffering=1, encoding="utf-8", errors="replace")  # closed on the way out
    out, own_out = _console_stream(sys.stdout, 1)
    err, own_err = _console_stream(sys.stderr, 2)
    saved_fds = [os.dup(1), os.dup(2)]
    os.dup2(log.fileno(), 1)
    os.dup2(log.fileno(), 2)
    saved_streams = (sys.stdout, sys.stderr)
    routers = (_Router(out, log), _Router(err, log))
    sys.stdout, sys.stderr = routers
    root = logging.getLogger()
    saved_logging = (root.level, list(root.handlers))
    console_handler = logging.StreamHandler(err)
    console_handler.addFilter(_ConsoleFilter())
    console_handler.setFormatter(logging.Formatter(_FORMAT))
    file_handler = logging.StreamHandler(log)
    file_handler.setFormatter(logging.Formatter("%(asctime)s " + _FORMAT))
    root.handlers[:] = [console_handler, file_handler]
    root.setLevel(logging.INFO)
    fault_was_on = faulthandler.is_enabled()
    if not fault_was_on:
        faulthandler.enable(file=err)
    _active = state
    crashed = False
    try:
        yield state
    except KeyboardInterrupt:
        raise
    except BaseException:
        crashed = True
        raise
    finally:
        _active = None
        if not fault_was_on:
            faulthandler.disable()
        root.handlers[:] = saved_logging[1]
        root.setLevel(saved_logging[0])
        for stream in (sys.stdout, sys.stderr, log):
            with contextlib.suppress(ValueError, OSError):
                stream.flush()
        sys.stdout, sys.stderr = saved_streams
        for router, stream in zip(routers, saved_streams):
            router.release(stream)
        for fd, saved in zip((1, 2), saved_fds):
            os.dup2(saved, fd)
            os.close(saved)
        for stream, own in ((out, own_out), (err, own_err)):
            if own:
                stream.close()
        log.close()
        _finish(state, show_tail=crashed)


def _finish(state: Capture, show_tail: bool) -> None:
    """Append the log to the run folder's ``jupiter.log`` (when the folder exists: a resumed run keeps one log),
    or leave it in the temporary folder and say where; drop it when empty.

    After an unexpected failure its last lines are printed, so an error another program printed is never hidden.
    A failure the command explained is its one error line: the log is kept in the run folder but not announced,
    and an empty log does not touch the folder (a refused run must not write into a finished one).
    """
    empty = state.path.stat().st_size == 0
    moved = state.folder is not None and state.folder.is_dir() and not (empty and state.failed)
    path = state.path
    if moved:
        path = state.folder / LOG_NAME
        with open(state.path, "rb") as source, open(path, "ab") as target:
            shutil.copyfileobj(source, target)
        state.path.unlink()
    elif empty:
        state.path.unlink()
        return
    if show_tail:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()[-TAIL_LINES:]
        if lines:
            print(f"jupiter: the last lines other programs printed (all of them in {path}):", file=sys.stderr)
            for line in lines:
                print(f"  {line}", file=sys.stderr)
    elif not moved:
        print(f"jupiter: other programs' output is in {path}", file=sys.stderr)
