"""The output folder of a distributed collection: one tree file per task and an append-only manifest.

Why this layout: a collection runs for hours on machines that die. Every finished tree is written at once,
atomically (``search.tree_io.save_tree(..., durable=True)``), so a reader never sees half a tree, and
one JSON line per outcome is appended to ``manifest.jsonl`` (flushed and fsynced) *after* its tree file is in
place. A rerun reads the manifest and skips every task whose last record says ``ok``: the manifest is the
only source of truth, so a tree file without a manifest line (the driver died between the two writes) is
simply solved again and overwritten, never duplicated.

Layout::

    OUT/manifest.jsonl          one ManifestRecord per line (oldest first; the last line per task wins)
    OUT/trees/<name>.json       search.tree_io's tree file for the task (name: ``tree_file_name(task_id)``)
    OUT/summary.json            the RunSummary of the last run (written at the end, also on Ctrl-C)
"""

from __future__ import annotations

import enum
import hashlib
import logging
import re
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from jupiter.appendlog import append_record, read_records

__all__ = [
    "TaskStatus",
    "DeathCause",
    "ManifestRecord",
    "Manifest",
    "tree_file_name",
    "MANIFEST_NAME",
    "TREES_DIR",
    "SUMMARY_NAME",
]

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.jsonl"
TREES_DIR = "trees"
SUMMARY_NAME = "summary.json"


class TaskStatus(str, enum.Enum):
    """What happened to one attempt at one task.

    OK: the tree finished and its file is written (a rerun skips the task).
    TREE_ERROR: the search could not run the tree (e.g. the sandbox root failed); the tree file holds what
        there is. Not skipped on a rerun: these are usually infrastructure problems worth another try.
    WORKER_DIED: the worker holding the tree died or failed; the task is queued again (``attempt`` + 1).
    GAVE_UP: the task's worker died on every allowed attempt; the run goes on without it.
    """

    OK = "ok"
    TREE_ERROR = "tree_error"
    WORKER_DIED = "worker_died"
    GAVE_UP = "gave_up"


class DeathCause(str, enum.Enum):
    """Why a worker stopped delivering trees (recorded with WORKER_DIED and GAVE_UP)."""

    OUT_OF_MEMORY = "out_of_memory"  # Ray's memory monitor (or the kernel, when Ray says so) killed it
    KILLED = "killed"  # the process ended by a signal (SIGKILL, ray.kill, kernel OOM killer unconfirmed)
    NODE_DIED = "node_died"  # its node left the cluster (or was preempted)
    ERROR = "error"  # the worker raised (policy server down, a bug): see ``error``
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class ManifestRecord:
    """One line of ``manifest.jsonl``.

    ``best_reward`` is the highest evaluation of an answer node (COLLECT: +1 when some path found the label,
    −1 when every answer was wrong; None without answers). ``seconds`` is the tree's wall time in its worker.
    ``cause`` and ``error`` say why a worker died (WORKER_DIED / GAVE_UP) or why a tree failed (TREE_ERROR).
    """

    task_id: str
    status: TaskStatus
    attempt: int
    worker: str | None = None
    best_reward: float | None = None
    nodes: int = 0
    seconds: float = 0.0
    answer: str | None = None
    correct: bool | None = None
    tree_file: str | None = None
    cause: DeathCause | None = None
    error: str | None = None
    finished_at: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", TaskStatus(self.status))
        if self.cause is not None:
            object.__setattr__(self, "cause", DeathCause(self.cause))
        if not isinstance(self.attempt, int) or self.attempt < 1:
            raise ValueError(f"ManifestRecord.attempt: must be an integer >= 1, got {self.attempt!r}")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["status"] = self.status.value
        out["cause"] = self.cause.value if self.cause else None
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ManifestRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class Manifest:
    """Append-only JSONL of ManifestRecords; safe to read while a run appends (a torn last line is skipped)."""

    def __init__(self, out_dir: str | Path) -> None:
        self.out_dir = Path(out_dir)
        self.path = self.out_dir / MANIFEST_NAME

    def append(self, record: ManifestRecord) -> None:
        """Append one record and make it durable (flush + fsync) before returning."""
        append_record(self.path, record.to_dict(), sort_keys=True)

    def read(self) -> list[ManifestRecord]:
        """Every readable record, oldest first. A torn or foreign line is logged and skipped."""
        records = []
        for number, raw in enumerate(read_records(self.path), 1):
            try:
                records.append(ManifestRecord.from_dict(raw))
            except (TypeError, ValueError, KeyError) as exc:
                log.warning("%s: skipping unreadable manifest record %d (%s)", self.path, number, exc)
        return records

    def latest(self) -> dict[str, ManifestRecord]:
        """The last record of each task id."""
        return {r.task_id: r for r in self.read()}

    def finished_ids(self) -> set[str]:
        """Task ids whose last record is OK (what a rerun skips)."""
        return {task_id for task_id, r in self.latest().items() if r.status is TaskStatus.OK}

    def attempts(self) -> dict[str, int]:
        """The highest attempt number recorded per task id."""
        out: dict[str, int] = {}
        for r in self.read():
            out[r.task_id] = max(out.get(r.task_id, 0), r.attempt)
        return out


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def tree_file_name(task_id: str) -> str:
    """A file name for ``task_id`` that is safe everywhere and unique even when two ids slug the same.

    Ids such as ``owner/repo/nb.ipynb#3fa2`` become ``owner_repo_nb.ipynb_3fa2-<8 hex of sha1(id)>.json``.
    """
    slug = _UNSAFE.sub("_", task_id).strip("._")[:80] or "task"
    digest = hashlib.sha1(task_id.encode("utf-8")).hexdigest()[:8]
    return f"{slug}-{digest}.json"


def now() -> float:
    """Wall-clock timestamp for ``finished_at`` (seconds since the epoch)."""
    return round(time.time(), 3)


def summarise_ids(ids: Iterable[str], limit: int = 5) -> str:
    """``a, b, c (+7 more)`` for log lines."""
    ids = list(ids)
    head = ", ".join(ids[:limit])
    return head + (f" (+{len(ids) - limit} more)" if len(ids) > limit else "")
