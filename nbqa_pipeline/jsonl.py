"""Append-only JSONL files: the storage every stage reads and writes, and what makes reruns resumable.

The mechanics (durable appends, torn-line repair, atomic rewrites) live in ``jupiter.appendlog``, shared
with the benchmark runs and the Ray manifest; this module keeps the names the stages use.
"""

from __future__ import annotations

from pathlib import Path

from jupiter.appendlog import append_record, read_records, write_records

__all__ = ["read_jsonl", "append_jsonl", "finished_ids", "write_jsonl"]

# the stages' names for the shared functions (same signatures)
read_jsonl, append_jsonl, write_jsonl = read_records, append_record, write_records


def finished_ids(path: str | Path, key: str = "id") -> set[str]:
    """The ``key`` values already written to ``path``: what a rerun skips."""
    return {str(r[key]) for r in read_records(path) if key in r}
