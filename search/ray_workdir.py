"""How big is the ``working_dir`` that ``ray job submit --working-dir DIR`` would upload, and why.

Why: Ray zips the working directory and stores it in the cluster's GCS, which refuses packages over its gRPC
message limit (512 MiB by default) with an error that does not say which files were the problem; a large
``.git``, a ``runs/`` folder or a downloaded data set is the usual culprit. This walks the folder the way Ray
does — skipping what ``.gitignore`` and ``.rayignore`` files (in any sub-folder) and the given excludes
match — and reports the total and the largest files, so the excludes can be fixed *before* submitting.

The ignore-file matching covers the common gitignore forms (``name``, ``dir/``, ``/anchored``, ``*.ext``,
``a/**/b``); negations (``!pattern``) are not applied, which can only make the estimate larger.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DEFAULT_EXCLUDES", "WorkdirReport", "check_working_dir", "GCS_LIMIT_BYTES"]

#: Excludes that a Jupiter checkout never needs on the cluster (also shipped as a .rayignore in docs/ray.md).
DEFAULT_EXCLUDES: tuple[str, ...] = (
    ".git/", "runs/", "out/", "outputs/", "data/", "cache/", ".cache/", "__pycache__/", "*.pyc",
    ".venv/", "venv/", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/", "*.egg-info/", ".ipynb_checkpoints/",
    "node_modules/", "wandb/", "*.gguf", "*.safetensors", "*.bin", "*.pt", "*.ckpt", "*.parquet", "*.zip",
    "*.tar.gz",
)

#: Ray's default ceiling for one uploaded package (``RAY_max_grpc_message_size``), compressed.
GCS_LIMIT_BYTES = int(os.environ.get("RAY_max_grpc_message_size", 512 * 2**20))

_IGNORE_FILES = (".gitignore", ".rayignore")


@dataclass(frozen=True)
class WorkdirReport:
    """What would be uploaded. Sizes in bytes, uncompressed (the zip is smaller, text compresses well)."""

    root: str
    total_bytes: int
    files: int
    excluded_bytes: int
    largest: tuple[tuple[str, int], ...]  # (path relative to root, bytes), biggest first
    largest_dirs: tuple[tuple[str, int], ...]  # top-level entries by total size
    limit_bytes: int

    @property
    def over_limit(self) -> bool:
        return self.total_bytes >= self.limit_bytes

    def to_dict(self) -> dict:
        return {
            "root": self.root, "total_bytes": self.total_bytes, "total_mib": round(self.total_bytes / 2**20, 2),
            "files": self.files, "excluded_bytes": self.excluded_bytes, "limit_mib": self.limit_bytes // 2**20,
            "over_limit": self.over_limit, "largest": [list(x) for x in self.largest],
            "largest_dirs": [list(x) for x in self.largest_dirs],
        }

    def describe(self) -> str:
        lines = [f"{self.root}: {self.total_bytes / 2**20:.1f} MiB in {self.files} files would be uploaded "
                 f"({self.excluded_bytes / 2**20:.1f} MiB excluded; Ray's limit is {self.limit_bytes // 2**20} MiB "
                 f"compressed)" + (" — TOO LARGE: add excludes" if self.over_limit else "")]
        lines += [f"  {size / 2**20:9.2f} MiB  {path}" for path, size in self.largest]
        return "\n".join(lines)


def _read_patterns(folder: Path) -> list[str]:
    patterns = []
    for name in _IGNORE_FILES:
        path = folder / name
        if path.is_file():
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "!")):
                    patterns.append(line)
    return patterns


def _matches(pattern: str, rel: str, is_dir: bool) -> bool:
    """gitignore-style match of ``pattern`` against ``rel`` (POSIX path relative to the pattern's folder)."""
    dir_only = pattern.endswith("/")
    pattern = pattern.rstrip("/")
    if dir_only and not is_dir:
        return False
    if "/" in pattern:  # anchored at the ignore file's folder
        pattern = pattern.lstrip("/")
        return fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(rel, pattern.replace("**/", ""))
    return fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pattern)


def check_working_dir(root: str | Path, excludes: tuple[str, ...] | list[str] = DEFAULT_EXCLUDES,
                      top: int = 10, use_ignore_files: bool = True) -> WorkdirReport:
    """Walk ``root`` as Ray would upload it, skipping ``excludes`` (gitignore patterns relative to ``root``)
    and what ignore files match; return the total and the ``top`` largest files and top-level entries."""
    root = Path(root).expanduser().resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"--check-working-dir: {root} is not a folder")
    rules: list[tuple[Path, str]] = [(root, p) for p in excludes]
    sizes: list[tuple[str, int]] = []
    by_top: dict[str, int] = {}
    excluded = 0

    def skipped(path: Path, is_dir: bool, active: list[tuple[Path, str]]) -> bool:
        for base, pattern in active:
            try:
                rel = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if _matches(pattern, rel, is_dir):
                return True
        return False

    def walk(folder: Path, active: list[tuple[Path, str]]) -> None:
        nonlocal excluded
        if use_ignore_files:
            active = active + [(folder, p) for p in _read_patterns(folder)]
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            path = Path(entry.path)
            is_dir = entry.is_dir(follow_symlinks=False)
            if skipped(path, is_dir, active):
                excluded += _size_of(path) if is_dir else _file_size(entry)
                continue
            if is_dir:
                walk(path, active)
            elif entry.is_file(follow_symlinks=False):
                size = _file_size(entry)
                rel = path.relative_to(root).as_posix()
                sizes.append((rel, size))
                head = rel.split("/", 1)[0] + ("/" if "/" in rel else "")
                by_top[head] = by_top.get(head, 0) + size

    walk(root, rules)
    sizes.sort(key=lambda item: -item[1])
    return WorkdirReport(
        root=str(root), total_bytes=sum(s for _, s in sizes), files=len(sizes), excluded_bytes=excluded,
        largest=tuple(sizes[:top]), largest_dirs=tuple(sorted(by_top.items(), key=lambda i: -i[1])[:top]),
        limit_bytes=GCS_LIMIT_BYTES,
    )


def _file_size(entry: os.DirEntry) -> int:
    try:
        return entry.stat(follow_symlinks=False).st_size
    except OSError:
        return 0


def _size_of(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, names in os.walk(folder):
        for name in names:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total
