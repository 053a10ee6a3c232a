"""Append-only JSONL files: the storage every stage reads and writes, and what makes reruns resumable.

Why append-only with one flush per record: a stage killed mid-run leaves every finished record on disk
(at worst a torn last line, which readers skip with a warning), so a rerun reads the finished ids and
continues where the last run stopped.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Iterator

__all__ = ["read_jsonl", "append_jsonl", "finished_ids", "write_jsonl"]

log = logging.getLogger(__name__)


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of ``path`` (none when it does not exist); torn or invalid lines are skipped."""
    path = Path(path)
    if not path.exists():
        return
    with path.open("r", encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                log.warning("%s:%d: skipping a line that is not valid JSON (a killed run?)", path, number)
                continue
            if isinstance(record, dict):
                yield record


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record and flush it to disk before returning."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False, sort_keys=False) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def write_jsonl(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Replace ``path`` with ``records`` atomically (write a temporary file, then rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def finished_ids(path: str | Path, key: str = "id") -> set[str]:
    """The ``key`` values already written to ``path``: what a rerun skips."""
    return {str(r[key]) for r in read_jsonl(path) if key in r}
