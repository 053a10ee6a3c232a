"""On-disk layout of one Sandbox: input files (read-only), one working directory per state, runtime home.

Files are state: a state's folder is copied to its child on ``branch()`` (by the forked runtime itself, so the
copy belongs to the runtime's user), input files are symlinks to one read-only copy, so they cost nothing.
"""
from __future__ import annotations

import itertools
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterable

__all__ = ["Layout", "WorkspaceError"]


class WorkspaceError(ValueError):
    """A bad input file or file name (the message names it)."""


class Layout:
    """Folders of one Sandbox under ``root``: ``inputs/``, ``states/``, ``home/``, ``faults/``, ``trash/``."""

    def __init__(self, root: Path | None, shared_writable: bool) -> None:
        self.owned = root is None
        self.root = Path(tempfile.mkdtemp(prefix="jupiter-sandbox-")) if root is None else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root = self.root.resolve()
        self._mode = 0o777 if shared_writable else 0o755
        self.inputs = self._dir("inputs", 0o755)
        self.states = self._dir("states", self._mode)
        self.home = self._dir("home", self._mode)
        self.faults = self._dir("faults", self._mode)
        self.trash = self._dir("trash", 0o700)
        os.chmod(self.root, 0o755)
        self._ids = itertools.count(1)

    def _dir(self, name: str, mode: int) -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        os.chmod(path, mode)
        return path

    def new_state_dir(self) -> Path:
        """A fresh, not yet existing path for a state's working directory."""
        return self.states / f"s{next(self._ids):06d}"

    def make_root_workspace(self, input_files: Iterable[Path]) -> tuple[Path, Path]:
        """Copy ``input_files`` into a read-only input folder and make a workspace that links to them.

        Returns ``(workspace, inputs_dir)``. Raises WorkspaceError naming a missing or duplicate file.
        """
        key = next(self._ids)
        inputs_dir = self.inputs / f"r{key:06d}"
        inputs_dir.mkdir()
        workspace = self.states / f"s{key:06d}"
        workspace.mkdir()
        os.chmod(workspace, self._mode)
        seen: set[str] = set()
        for item in input_files:
            src = Path(item)
            if not src.exists():
                raise WorkspaceError(f"input file not found: {src}")
            if src.name in seen:
                raise WorkspaceError(f"two input files share the name {src.name!r}: {src}")
            seen.add(src.name)
            dest = inputs_dir / src.name
            if src.is_dir():
                shutil.copytree(src, dest)
            else:
                shutil.copy2(src, dest)
            _make_readonly(dest)
            (workspace / src.name).symlink_to(os.path.relpath(dest, workspace))  # relative: valid inside bwrap
        os.chmod(inputs_dir, 0o555)
        return workspace, inputs_dir

    def discard(self, path: Path) -> None:
        """Move a state folder out of the way (fast) and delete it."""
        if not path.exists():
            return
        target = self.trash / f"{path.name}-{next(self._ids)}"
        os.rename(path, target)
        shutil.rmtree(target, ignore_errors=True)

    def cleanup(self) -> None:
        if self.owned:
            _make_writable(self.inputs)
            shutil.rmtree(self.root, ignore_errors=True)


def _make_readonly(path: Path) -> None:
    mode = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
    if path.is_dir():
        for sub in path.rglob("*"):
            os.chmod(sub, mode | (0o111 if sub.is_dir() else 0))
        os.chmod(path, mode | 0o111)
    else:
        os.chmod(path, mode)


def _make_writable(path: Path) -> None:
    for dirpath, _dirs, _files in os.walk(path):
        os.chmod(dirpath, 0o755)


def read_state_file(workspace: Path, name: str | os.PathLike) -> bytes:
    """Read a file of a state; the path must stay inside the workspace (symlinks to inputs are allowed)."""
    rel = Path(name)
    if rel.is_absolute():
        raise WorkspaceError(f"read_file wants a path relative to the state's workspace, got {name}")
    target = workspace / rel
    if ".." in rel.parts:
        raise WorkspaceError(f"read_file path leaves the workspace: {name}")
    if not target.is_file():
        raise FileNotFoundError(f"no file {name!s} in the state's workspace {workspace}")
    return target.read_bytes()
