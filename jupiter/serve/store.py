"""The job store: one SQLite table of jobs with their settings, progress, result and (compact) tree.

Why SQLite: a server restarted after a crash must find every job it accepted. SQLite in WAL mode gives
durable, atomic row updates from the driver thread while the web thread reads, with no service to run. Every
state change is one short transaction; the driver writes progress and the tree at every iteration, so a
``kill -9`` loses at most the step in flight (running jobs are re-queued at the next start).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupiter.client import JobStatus  # the server's statuses are the ones its clients read

__all__ = ["JobStatus", "JobRecord", "JobStore"]

_EMPTY_PROGRESS = {"iterations": 0, "nodes": 0, "tokens": 0, "answers": 0}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq       INTEGER PRIMARY KEY AUTOINCREMENT,
    id        TEXT NOT NULL UNIQUE,
    status    TEXT NOT NULL,
    task_id   TEXT NOT NULL,
    question  TEXT NOT NULL,
    created   REAL NOT NULL,
    started   REAL,
    finished  REAL,
    settings  TEXT NOT NULL,
    progress  TEXT NOT NULL,
    result    TEXT,
    tree      TEXT,
    error     TEXT,
    attempts  INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status);
"""


@dataclass(frozen=True)
class JobRecord:
    """One row of the jobs table (JSON columns decoded). Times are Unix seconds."""

    id: str
    status: JobStatus
    task_id: str
    question: str
    created: float
    started: float | None
    finished: float | None
    settings: dict[str, Any]
    progress: dict[str, int]
    result: dict[str, Any] | None
    error: str | None
    attempts: int = 0
    tree: dict[str, Any] | None = field(default=None, repr=False)

    def to_json(self, with_result: bool = True) -> dict[str, Any]:
        """The API's job object (``GET /v1/tasks/{id}``); lists leave the result out."""
        out: dict[str, Any] = {
            "id": self.id,
            "status": self.status.value,
            "task_id": self.task_id,
            "question": self.question,
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "progress": dict(self.progress),
            "settings": dict(self.settings),
            "error": self.error,
            "attempts": self.attempts,
        }
        if with_result:
            out["result"] = self.result
        return out


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class JobStore:
    """Thread-safe access to the jobs table (one connection, one lock: every operation is a short transaction).

    ``path`` is created with its folder; the database runs in WAL mode with ``synchronous=NORMAL`` (a committed
    row survives a process crash; only an OS crash may lose the last transactions).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------------------------------ writes

    def _write(self, sql: str, params: Iterable[Any]) -> int:
        with self._lock:
            cursor = self._db.execute(sql, tuple(params))
            return cursor.rowcount

    def insert(self, job_id: str, task_id: str, question: str, settings: dict[str, Any]) -> JobRecord:
        """A new queued job (the record is built from what was written, not read back: one statement a submit)."""
        created = time.time()
        settings_json = json.dumps(settings)
        self._write(
            "INSERT INTO jobs (id, status, task_id, question, created, settings, progress) VALUES (?,?,?,?,?,?,?)",
            (job_id, JobStatus.QUEUED.value, task_id, question, created, settings_json,
             json.dumps(_EMPTY_PROGRESS)),
        )
        return JobRecord(id=job_id, status=JobStatus.QUEUED, task_id=task_id, question=question, created=created,
                         started=None, finished=None, settings=json.loads(settings_json),
                         progress=dict(_EMPTY_PROGRESS), result=None, error=None)

    def mark_running(self, job_id: str) -> bool:
        """queued → running (False when the job is no longer queued, e.g. cancelled meanwhile)."""
        return self._write(
            "UPDATE jobs SET status=?, started=?, attempts=attempts+1 WHERE id=? AND status=?",
            (JobStatus.RUNNING.value, time.time(), job_id, JobStatus.QUEUED.value),
        ) == 1

    def update_progress(self, job_id: str, progress: dict[str, int], tree: dict[str, Any] | None) -> None:
        """Progress counters and the compact tree of a running job (called every iteration)."""
        self._write("UPDATE jobs SET progress=?, tree=COALESCE(?, tree) WHERE id=?",
                    (json.dumps(progress), None if tree is None else json.dumps(tree, default=str), job_id))

    def finish(self, job_id: str, status: JobStatus, result: dict[str, Any] | None, tree: dict[str, Any] | None,
               error: str | None, progress: dict[str, int] | None = None) -> None:
        """A final status with its result (result.json's dict), tree and error."""
        if not status.finished:
            raise ValueError(f"finish: {status.value} is not a final status")
        self._write(
            "UPDATE jobs SET status=?, finished=?, result=?, tree=COALESCE(?, tree), error=?, "
            "progress=COALESCE(?, progress) WHERE id=?",
            (status.value, time.time(), None if result is None else json.dumps(result, default=str),
             None if tree is None else json.dumps(tree, default=str), error,
             None if progress is None else json.dumps(progress), job_id),
        )

    def cancel_queued(self, job_id: str) -> bool:
        """queued → cancelled; False when the job was not queued."""
        return self._write("UPDATE jobs SET status=?, finished=? WHERE id=? AND status=?",
                           (JobStatus.CANCELLED.value, time.time(), job_id, JobStatus.QUEUED.value)) == 1

    def requeue(self, job_id: str) -> None:
        """running → queued (the server stopped under it); progress and partial tree are reset."""
        self._write("UPDATE jobs SET status=?, started=NULL, progress=?, tree=NULL WHERE id=? AND status=?",
                    (JobStatus.QUEUED.value, json.dumps(_EMPTY_PROGRESS), job_id, JobStatus.RUNNING.value))

    def requeue_running(self) -> list[str]:
        """At start-up: every job left running by a crashed server goes back to the queue. Returns their ids."""
        ids = [r.id for r in self.list(JobStatus.RUNNING, limit=None)]
        for job_id in ids:
            self.requeue(job_id)
        return ids

    def delete(self, job_id: str) -> None:
        self._write("DELETE FROM jobs WHERE id=?", (job_id,))

    # ------------------------------------------------------------------------------------------- reads

    def _row(self, row: sqlite3.Row, with_tree: bool = False) -> JobRecord:
        return JobRecord(
            id=row["id"], status=JobStatus(row["status"]), task_id=row["task_id"], question=row["question"],
            created=row["created"], started=row["started"], finished=row["finished"],
            settings=_loads(row["settings"]) or {}, progress=_loads(row["progress"]) or dict(_EMPTY_PROGRESS),
            result=_loads(row["result"]), error=row["error"], attempts=row["attempts"],
            tree=_loads(row["tree"]) if with_tree else None,
        )

    def get(self, job_id: str, with_tree: bool = False) -> JobRecord | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        return None if row is None else self._row(row, with_tree)

    def list(self, status: JobStatus | None = None, limit: int | None = 100, oldest_first: bool = False,
             ) -> list[JobRecord]:
        """Jobs newest first (or oldest first), optionally of one status; no trees."""
        sql = "SELECT id, status, task_id, question, created, started, finished, settings, progress, " \
              "result, error, attempts FROM jobs"
        params: list[Any] = []
        if status is not None:
            sql += " WHERE status=?"
            params.append(status.value)
        sql += " ORDER BY seq " + ("ASC" if oldest_first else "DESC")
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [self._row(r) for r in rows]

    def counts(self) -> dict[JobStatus, int]:
        """How many jobs have each status (every status present, zeros included)."""
        with self._lock:
            rows = self._db.execute("SELECT status, COUNT(*) AS n FROM jobs GROUP BY status").fetchall()
        out = {s: 0 for s in JobStatus}
        for row in rows:
            out[JobStatus(row["status"])] = int(row["n"])
        return out

    def count(self, status: JobStatus) -> int:
        """How many jobs have ``status`` (read from the status index: cheap however many jobs are kept, unlike
        ``counts``, which reads them all; every submit asks it for the queue's length)."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM jobs WHERE status=?", (status.value,)).fetchone()[0])

    def finished_before(self, cutoff: float) -> list[str]:
        """Ids of final jobs that finished before ``cutoff`` (Unix seconds): what garbage collection removes."""
        finals = tuple(s.value for s in JobStatus if s.finished)
        with self._lock:
            rows = self._db.execute(
                f"SELECT id FROM jobs WHERE status IN ({','.join('?' * len(finals))}) AND finished < ?",
                (*finals, cutoff)).fetchall()
        return [r["id"] for r in rows]
