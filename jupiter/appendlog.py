"""Append-only JSONL logs: how every long run (NbQA stages, benchmark runs, Ray collection) survives a kill.

One record per line, each append flushed and fsynced before returning, so a killed run leaves every finished
record on disk and a rerun can skip what is done. A kill mid-write can leave a torn last line: readers skip it
with a warning, and the next append first cuts it off — otherwise the new record would be glued onto the
fragment and lost with it.

Input files that users hand us are read strictly by ``jupiter.task.read_jsonl`` (errors name the line); this
module is for files we write ourselves, and holds the one way a whole file is replaced (``replace_atomically``).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["append_record", "read_records", "write_records", "repair_tail", "replace_atomically"]

log = logging.getLogger(__name__)


def repair_tail(path: str | Path) -> int:
    """Cut an incomplete last line (no trailing newline) off ``path``; returns the bytes removed."""
    path = Path(path)
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return 0
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) == b"\n":
                return 0
            data = (handle.seek(0), handle.read())[1]
    except FileNotFoundError:
        return 0
    keep = data.rfind(b"\n") + 1
    with open(path, "r+b") as handle:
        handle.truncate(keep)
    log.warning("%s: dropped an incomplete last line (%d bytes) left by a killed run", path, len(data) - keep)
    return len(data) - keep


def append_record(
    path: str | Path,
    record: Mapping[str, Any],
    *,
    sort_keys: bool = False,
    default: Callable[[Any], Any] | None = None,
) -> None:
    """Append one record as a JSON line and make it durable (flush + fsync) before returning.

    Not safe against concurrent appends from several threads on one file: callers that append from threads
    hold their own lock.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    repair_tail(path)
    line = json.dumps(record, ensure_ascii=False, sort_keys=sort_keys, default=default)
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def read_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the JSON-object lines of ``path``, oldest first (nothing when it does not exist).

    Torn or invalid lines and non-object lines are logged and skipped.
    """
    path = Path(path)
    if not path.is_file():
        return
    with open(path, encoding="utf-8", errors="replace") as handle:
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


def write_records(
    path: str | Path, records: Iterable[Mapping[str, Any]], *, default: Callable[[Any], Any] | None = None
) -> None:
    """Replace ``path`` with ``records`` atomically (a temporary file in the same folder, then rename)."""
    def write(tmp: Path) -> None:
        with open(tmp, "w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False, default=default) + "\n")

    replace_atomically(path, write)


def replace_atomically(path: str | Path, write: Callable[[Path], Any], durable: bool = False) -> Path:
    """Replace ``path`` whole or not at all: ``write(tmp)`` fills a temporary file in the same folder (created
    with it), which is fsynced when ``durable`` and renamed over ``path``; a failed write leaves ``path`` as it
    was and no temporary file. ``durable`` matters where a later record (a manifest line) vouches for the file:
    a crash must not keep the record and lose the file (it costs an fsync, about 8 ms on a busy disk)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        if durable:
            with open(tmp, "rb") as handle:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path
