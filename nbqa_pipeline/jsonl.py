"""Append-only JSONL files: the storage every stage reads and writes, and what makes reruns resumable.

The mechanics (durable appends, torn-line repair, atomic rewrites) live in ``jupiter.appendlog``, shared
with the benchmark runs and the Ray manifest; this module keeps the names the stages use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from jupiter.appendlog import append_record, read_records, write_records

__all__ = ["read_jsonl", "append_jsonl", "finished_ids", "write_jsonl"]


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the records of ``path`` (none when it does not exist); torn or invalid lines are skipped."""
    return read_records(path)


def append_jsonl(path: str | Path, record: dict[str, Any]) -> None:
    """Append one record and flush it to disk before returning (a torn last line is cut off first)."""
    append_record(path, record)


def write_jsonl(path: str | Path, records: list[dict[str, Any]]) -> None:
    """Replace ``path`` with ``records`` atomically (write a temporary file, then rename)."""
    write_records(path, records)


def finished_ids(path: str | Path, key: str = "id") -> set[str]:
    """The ``key`` values already written to ``path``: what a rerun skips."""
    return {str(r[key]) for r in read_records(path) if key in r}
