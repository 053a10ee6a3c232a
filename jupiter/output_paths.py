"""One check of every command's output path, made before any work starts.

Why: a newcomer who points ``--out`` at an existing file, at a folder they cannot write, or at a finished run
should learn it in one line at once — not after an hour of search, and never by having a finished run
silently overwritten. Every command (``solve``, ``bench``, ``value``, ``score``, ``nbqa``,
``search/collect.py``) calls these functions; they raise ``OutputError`` (a ``TaskError``, so the CLI exits
with code 2 and prints the message).

Three kinds of output:

* a **file** (``-o scores.jsonl``): must not be a folder; its folder must exist or be creatable, and writable;
* a **resumable folder** (bench runs, Ray collections, NbQA stages, value training): may exist and hold
  earlier work (a rerun resumes there); must be a writable folder;
* a **run folder** of ``jupiter solve``: a fresh folder; an existing non-empty one is refused unless
  ``--force`` is given, or it holds an interrupted run (or a killed one's checkpoint), whose files move to
  ``previous-<time>/`` before the new run continues its checkpointed tree (``search.checkpoints``).
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from jupiter.task import TaskError

__all__ = [
    "OutputError",
    "RunFolderState",
    "RunFolder",
    "check_output_file",
    "check_output_folder",
    "check_run_folder",
    "default_run_dir",
    "move_previous_run",
]


class OutputError(TaskError):
    """An output path that cannot be used; the message names the option and the path."""


class RunFolderState(str, enum.Enum):
    """What ``check_run_folder`` found at a solve run's ``--out``."""

    NEW = "new"  # absent or empty: write there
    INTERRUPTED = "interrupted"  # holds an interrupted, failed or killed run: keep its files, continue its tree
    FORCED = "forced"  # holds something else, and --force was given: write over it


@dataclass(frozen=True)
class RunFolder:
    """A checked solve run folder (``state`` says what was there before)."""

    path: Path
    state: RunFolderState


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists (the folder a new path would be created in)."""
    current = path.absolute()
    while not current.exists() and current != current.parent:
        current = current.parent
    return current


def _probe_writable(folder: Path) -> str | None:
    """None when a file can be created in ``folder``; else why not.

    A real probe, not ``os.access``: root passes every access check, yet a read-only mount still refuses.
    """
    try:
        handle, name = tempfile.mkstemp(prefix=".jupiter-write-check-", dir=folder)
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(handle)
    with contextlib.suppress(OSError):  # the probe file is empty and hidden: failing to remove it is no failure
        os.unlink(name)
    return None


def _check_folder_path(path: Path, option: str) -> None:
    if path.exists() and not path.is_dir():
        raise OutputError(f"{option} {path}: is an existing file, not a folder; give a folder path")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise OutputError(f"{option} {path}: {base} is a file, so the folder cannot be created there")
    problem = _probe_writable(base)
    if problem is not None:
        where = "it" if base == path.absolute() else f"{base} (where it would be created)"
        raise OutputError(f"{option} {path}: cannot create files in {where}: {problem}")


def check_output_folder(path: str | Path, option: str = "--out") -> Path:
    """Check a resumable output folder: absent (creatable) or an existing writable folder. Returns the path.

    Earlier work inside is kept (the command resumes there); nothing is created by this check.
    """
    path = Path(path)
    _check_folder_path(path, option)
    return path


def check_output_file(path: str | Path, option: str = "--output") -> Path:
    """Check an output file: not a folder, in a folder that exists or can be created, writable. Returns it.

    An existing file is allowed (the command writes it again): file outputs are results one re-derives
    cheaply, unlike a run folder.
    """
    path = Path(path)
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a folder; give a file path")
    if path.exists() and not path.is_file():
        raise OutputError(f"{option} {path}: exists and is not a regular file")
    base = _nearest_existing(path.parent)
    if not base.is_dir():
        raise OutputError(f"{option} {path}: {base} is a file, so the file's folder cannot be created")
    problem = _probe_writable(base)
    if problem is not None:
        raise OutputError(f"{option} {path}: cannot create files in {base}: {problem}")
    return path


def _was_interrupted(folder: Path) -> bool:
    """The folder holds a solve run that stopped early: interrupted or failed mid-search (its ``result.json``
    says so), or killed before it could write one (only its checkpoint is there)."""
    try:
        record = json.loads((folder / "result.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return any((folder / "checkpoints").glob("*.json"))  # search.checkpoints.CHECKPOINTS
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and bool(record.get("interrupted"))


def check_run_folder(path: str | Path, force: bool = False, option: str = "--out") -> RunFolder:
    """Check ``jupiter solve``'s run folder before the search starts.

    Absent or empty: NEW. Holding an interrupted run: INTERRUPTED (the caller reads its checkpoint, moves its
    files aside with ``move_previous_run`` and continues the tree, or starts over without one). Holding anything else:
    refused with a hint to ``--force`` (FORCED when given: the new run's files replace the old ones of the same name).
    """
    path = Path(path)
    _check_folder_path(path, option)
    kept = [e for e in path.iterdir() if not (e.is_dir() and e.name.startswith("previous-"))] \
        if path.is_dir() else []
    if not kept:  # absent, empty, or only earlier runs set aside by a restart
        return RunFolder(path, RunFolderState.NEW)
    if _was_interrupted(path):
        return RunFolder(path, RunFolderState.INTERRUPTED)
    if force:
        return RunFolder(path, RunFolderState.FORCED)
    what = "a finished run" if (path / "result.json").is_file() else "other files"
    raise OutputError(f"{option} {path}: the folder already holds {what}; "
                      "choose a new --out, or add --force to write over it")


def default_run_dir(out: str | Path | None, task_id: str) -> Path:
    """A solve run's folder: ``out`` when given, else ``runs/<task id made path-safe>-<time>``."""
    if out is not None:
        return Path(out)
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", task_id).strip("_") or "task"
    return Path("runs") / f"{safe}-{time.strftime('%Y%m%d-%H%M%S')}"


def move_previous_run(folder: Path) -> Path:
    """Move every entry of ``folder`` except earlier ``previous-*`` folders into ``folder/previous-<time>/``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = folder / f"previous-{stamp}"
    suffix = 1
    while target.exists():
        suffix += 1
        target = folder / f"previous-{stamp}-{suffix}"
    target.mkdir()
    for entry in sorted(folder.iterdir()):
        if entry == target or (entry.is_dir() and entry.name.startswith("previous-")):
            continue
        entry.rename(target / entry.name)
    return target
