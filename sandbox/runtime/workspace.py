"""On-disk layout of one Sandbox: input files (read-only), one working directory per state, runtime home.

Files are state: a state's folder is copied to its child on ``branch()`` (by the forked runtime itself, so the
copy belongs to the runtime's user), input files are symlinks to one read-only copy, so they cost nothing.
"""
from __future__ import annotations

import errno
import itertools
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path

__all__ = ["Layout", "WorkspaceError", "tree_bytes"]


class WorkspaceError(ValueError):
    """A bad input file or file name (the message names it)."""


class Layout:
    """Folders of one Sandbox under ``root``: ``inputs/``, ``states/``, ``home/``, ``trash/``."""

    def __init__(self, root: Path | None, shared_writable: bool, cell_uid: int | None = None) -> None:
        self.owned = root is None
        self.root = Path(tempfile.mkdtemp(prefix="jupiter-sandbox-")) if root is None else Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.root = self.root.resolve()
        self.cell_uid = cell_uid if shared_writable else None
        self._mode = 0o777 if shared_writable else 0o755
        self.inputs = self._dir("inputs", 0o755)
        # Cells run as one user: where they do, ``states/`` is the host's and cannot be listed (0711), and each
        # workspace belongs to that user alone (0700) under a name with a random part, so that a cell cannot find
        # another state's files (``new_state_dir``).
        self.states = self._dir("states", 0o711 if self.cell_uid is not None else self._mode)
        self.home = self._dir("home", self._mode)
        self.trash = self._dir("trash", 0o700)
        os.chmod(self.root, 0o755)
        self._ids = itertools.count(1)

    def _dir(self, name: str, mode: int) -> Path:
        path = self.root / name
        path.mkdir(exist_ok=True)
        os.chmod(path, mode)
        return path

    def new_state_dir(self, key: int | None = None) -> Path:
        """A fresh, not yet existing path for a state's working directory: ``s<number>-<random>``."""
        number = next(self._ids) if key is None else key
        return self.states / f"s{number:06d}-{secrets.token_hex(8)}"

    def make_state_dir(self, path: Path) -> None:
        """Create a state's (empty) working folder, owned by the cells' user where they run as one (what an
        earlier, failed attempt left there is discarded). Plain ``os`` calls on one string: this is on every
        branch's path."""
        name = os.fspath(path)
        try:
            os.mkdir(name, 0o700)
        except FileExistsError:
            self.discard(path)
            os.mkdir(name, 0o700)
        if self.cell_uid is not None:
            os.chown(name, self.cell_uid, self.cell_uid)
            os.chmod(name, 0o700)  # whatever the umask
        else:
            os.chmod(name, self._mode)

    def make_root_workspace(self, input_files: Iterable[Path]) -> tuple[Path, Path]:
        """Copy ``input_files`` into a read-only input folder and make a workspace that links to them.

        Returns ``(workspace, inputs_dir)``. Raises WorkspaceError naming a missing or duplicate file.
        """
        key = next(self._ids)
        inputs_dir = self.inputs / f"r{key:06d}"
        inputs_dir.mkdir()
        workspace = self.new_state_dir(key)
        self.make_state_dir(workspace)
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

    def clear_inputs(self) -> None:
        """Delete every root's read-only copy of its input files (no state may link to them any more)."""
        for entry in os.scandir(self.inputs):
            path = Path(entry.path)
            _make_writable(path)
            shutil.rmtree(path, ignore_errors=True)

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


def read_state_file(workspace: Path, name: str | os.PathLike[str], inputs_dir: Path | None = None) -> bytes:
    """Read a file of a state without following any link a cell could have planted.

    Every component is opened relative to the one before with ``O_NOFOLLOW`` (no path is looked up again), so a
    link to ``/etc/shadow`` named ``submission.csv``, or a linked folder, is refused: the host reads as root what
    the cell could not. The one kind of link followed is an input link (the workspace's links to the read-only
    copies of the inputs): it is followed lexically and only into ``inputs_dir``, which cells cannot change.
    Raises WorkspaceError (a path or link leaving the workspace, not a regular file), FileNotFoundError.
    """
    rel = Path(name)
    if rel.is_absolute():
        raise WorkspaceError(f"read_file wants a path relative to the state's workspace, got {name}")
    if ".." in rel.parts:
        raise WorkspaceError(f"read_file path leaves the workspace: {name}")
    return _read_beneath(Path(workspace), rel.parts, name, inputs_dir)


def _read_beneath(base: Path, parts: tuple[str, ...], name: str | os.PathLike[str],
                  inputs_dir: Path | None) -> bytes:
    parts = tuple(p for p in parts if p not in ("", "."))
    if not parts:
        raise WorkspaceError(f"read_file wants a file, got {name!s}")
    try:
        fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileNotFoundError(f"no file {name!s}: the folder {base} is gone") from None
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (0 if last else os.O_DIRECTORY)
            try:
                nxt = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                raise FileNotFoundError(f"no file {name!s} in the state's workspace {base}") from None
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                    raise
                info = os.lstat(part, dir_fd=fd)
                if not stat.S_ISLNK(info.st_mode):
                    raise WorkspaceError(f"read_file: {name!s} is not a file of the workspace") from None
                target = Path(os.path.normpath(base.joinpath(*parts[:index], os.readlink(part, dir_fd=fd))))
                if inputs_dir is None or not target.is_relative_to(inputs_dir):
                    raise WorkspaceError(f"read_file: {name!s} goes through a link out of the workspace "
                                         f"({'/'.join(parts[:index + 1])}); links are not followed") from None
                return _read_beneath(Path(inputs_dir), (*target.relative_to(inputs_dir).parts, *parts[index + 1:]),
                                     name, None)
            os.close(fd)
            fd = nxt
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise WorkspaceError(f"read_file: {name!s} is not a regular file")
        chunks: list[bytes] = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    finally:
        os.close(fd)


def tree_bytes(path: Path) -> int:
    """Bytes of the files under ``path`` (apparent sizes, as a branch would copy them), links not followed."""
    total = 0
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                total += tree_bytes(Path(entry.path))
            elif entry.is_file(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total
