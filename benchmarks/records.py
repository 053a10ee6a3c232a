"""Per-task result lines and the append-only results file that makes benchmark runs resumable.

A run writes one JSON line per task to ``results.jsonl`` as soon as that task's search finishes, flushed and
fsynced, so an interrupted run loses at most the trees in flight; a rerun reads the ids already there and
skips them. A torn last line (a crash mid-write) is ignored and overwritten by the rerun.

A line holds everything a report needs without the tree: the decided answer, the vote and value answers,
every candidate with the iteration it was found in, the label, the cost counters, and benchmark-specific
fields added by the runner (``extra``).

When an invocation dies before its tasks are done (the policy backend crashed, a server went away), the run
folder says so in ``failure.json`` (``RunFailure``: the error, what finished, what did not); the reports
read it, so a failed run never looks like a finished run with zero tasks. A later invocation that finishes
every task removes it.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from jupiter.appendlog import append_record, read_records, repair_tail, replace_atomically
from search.result import SearchResult
from search.tree import Tree

__all__ = ["CandidateRecord", "TaskRecord", "ResultsLog", "record_from_result",
           "iteration_numbers", "FailureSource", "RunFailure", "FAILURE_FILE", "write_failure",
           "read_failure", "clear_failure"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CandidateRecord:
    """One answer node of a tree: its answer text, voting key, value and the iteration that found it."""

    tag: str
    answer: str
    key: str
    value: float
    iteration: int | None
    visits: int = 0
    multiplicity: int = 1  # sampled replies this answer node stands for (its votes)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CandidateRecord:
        return cls(
            tag=str(d.get("tag", "")),
            answer=str(d.get("answer", "")),
            key=str(d.get("key", "")),
            value=float(d.get("value") or 0.0),
            iteration=None if d.get("iteration") is None else int(d["iteration"]),
            visits=int(d.get("visits") or 0),
            multiplicity=max(1, int(d.get("multiplicity") or 1)),
        )


@dataclass(frozen=True)
class TaskRecord:
    """One task's line in ``results.jsonl``."""

    id: str
    benchmark: str
    answer: str | None
    vote_answer: str | None = None
    value_answer: str | None = None
    decided_by: str = ""
    candidates: tuple[CandidateRecord, ...] = ()
    label: str | None = None
    iterations: int = 0
    nodes: int = 0
    model_calls: int = 0
    seconds: float = 0.0
    stats: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The fields in declaration order, then ``extra``'s keys (one named like a field replaces it in place)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out["candidates"] = [c.to_dict() for c in self.candidates]
        out["stats"] = dict(self.stats)
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TaskRecord:
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            id=str(d["id"]),
            benchmark=str(d.get("benchmark", "")),
            answer=d.get("answer"),
            vote_answer=d.get("vote_answer"),
            value_answer=d.get("value_answer"),
            decided_by=str(d.get("decided_by") or ""),
            candidates=tuple(CandidateRecord.from_dict(c) for c in d.get("candidates") or ()),
            label=d.get("label"),
            iterations=int(d.get("iterations") or 0),
            nodes=int(d.get("nodes") or 0),
            model_calls=int(d.get("model_calls") or 0),
            seconds=float(d.get("seconds") or 0.0),
            stats=dict(d.get("stats") or {}),
            error=d.get("error"),
            extra={k: v for k, v in d.items() if k not in known},
        )


def iteration_numbers(tree: Tree, is_tree_mode: bool) -> dict[str, int]:
    """Node tag → the search iteration that created it, read from the tree's shape.

    Nodes carry their creation order, not their iteration. In the tree modes every iteration expands one node
    and its children are created together, so a node's iteration is the rank of its parent's expansion among
    all expansions (ordered by the first child's creation order); an iteration whose replies were all dropped
    leaves no trace, so the numbers can run slightly behind. In REACT/VOTE every step extends each live path
    by one node, so a node's iteration is its depth.
    """
    nodes = [n for n in tree.nodes if n.parent is not None]
    out: dict[str, int] = {}
    if is_tree_mode:
        first_child: dict[str, int] = {}
        for node in nodes:
            key = node.parent.tag
            first_child[key] = min(first_child.get(key, node.order), node.order)
        rank = {tag: i + 1 for i, (tag, _) in enumerate(sorted(first_child.items(), key=lambda kv: kv[1]))}
        for node in nodes:
            out[node.tag] = rank[node.parent.tag]
    else:
        for node in nodes:
            out[node.tag] = int(node.depth)
    return out


def record_from_result(result: SearchResult, benchmark: str, extra: Mapping[str, Any] | None = None) -> TaskRecord:
    """A ``search.SearchResult`` → TaskRecord (the tree itself is saved separately, if at all)."""
    iterations = iteration_numbers(result.tree, result.config.mode.is_tree)
    candidates = tuple(CandidateRecord(tag=c.tag, answer=c.answer, key=c.key, value=float(c.value),
                                       iteration=iterations.get(c.tag), visits=c.visits,
                                       multiplicity=max(1, c.multiplicity))
                       for c in result.candidates)
    stats = result.stats
    return TaskRecord(
        id=str(result.task_id),
        benchmark=benchmark,
        answer=result.answer,
        vote_answer=result.vote_answer,
        value_answer=result.value_answer,
        decided_by=str(result.decided_by),
        candidates=candidates,
        label=result.tree.task.label if result.tree.task is not None else None,
        iterations=int(stats.iterations),
        nodes=int(stats.nodes),
        model_calls=int(stats.model_calls),
        seconds=round(float(stats.wall_seconds), 3),
        stats=stats.to_dict(),
        error=result.error,
        extra=dict(extra or {}),
    )


class ResultsLog:
    """``results.jsonl`` of a run: append one line per finished task; read back the finished ids.

    Safe to append from several threads. Lines for an id already present are not written again.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(self.path)  # a torn last line left by a crash: appends start on a fresh line
        self._done = {r["id"] for r in self._read_raw()}

    def _read_raw(self) -> Iterator[dict[str, Any]]:
        for record in read_records(self.path):
            if "id" in record:
                record["id"] = str(record["id"])
                yield record

    @property
    def done_ids(self) -> set[str]:
        return set(self._done)

    def append(self, record: TaskRecord) -> bool:
        """Write ``record`` (False, and nothing written, when its id is already done)."""
        with self._lock:
            if record.id in self._done:
                return False
            append_record(self.path, record.to_dict(), default=str)
            self._done.add(record.id)
        return True

    def records(self) -> list[TaskRecord]:
        """Every finished task, first line per id."""
        seen: set[str] = set()
        out = []
        for raw in self._read_raw():
            if raw["id"] not in seen:
                seen.add(raw["id"])
                out.append(TaskRecord.from_dict(raw))
        return out


#: the failure record's name in a run folder
FAILURE_FILE = "failure.json"


class FailureSource(str, enum.Enum):
    """What broke an invocation: the policy backend (a ``PolicyError``) or anything else in the run."""

    POLICY = "policy"
    RUN = "run"


@dataclass(frozen=True)
class RunFailure:
    """``failure.json``: why an invocation stopped before its tasks were done, and where it left the run.

    Attributes:
        source: the policy backend, or the run itself (value model, driver).
        backend: the policy, as ``name (--llm SPEC)``; empty when unknown.
        error: the exception that ended the run, one line (``Type: message``).
        cause: the innermost exception of its chain, one line (the backend's own error).
        finished: ids of the selected tasks in ``results.jsonl`` when it stopped (also earlier invocations').
        unfinished: ids of the selected tasks not searched to the end (a rerun searches them).
        at: local time it stopped (ISO 8601, seconds).
        traceback: the full traceback, for a bug report.
    """

    source: FailureSource
    backend: str
    error: str
    cause: str
    finished: tuple[str, ...]
    unfinished: tuple[str, ...]
    at: str
    traceback: str = ""

    def line(self, path: str | Path | None = None) -> str:
        """One line for the console: who failed and why, how far the run got, where it is recorded."""
        who = f"the policy backend {self.backend}" if self.source is FailureSource.POLICY else "the run"
        if self.source is FailureSource.RUN and self.backend:
            who += f" (policy {self.backend})"
        error = self.error if self.cause in self.error else f"{self.error} (cause: {self.cause})"
        total = len(self.finished) + len(self.unfinished)
        where = f" (recorded in {path})" if path is not None else ""
        return (f"{who} failed: {error}; {len(self.finished)} of {total} task(s) finished, "
                f"{len(self.unfinished)} unfinished{where}; rerun the same command to resume")

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source.value, "backend": self.backend, "error": self.error, "cause": self.cause,
                "finished": list(self.finished), "unfinished": list(self.unfinished), "at": self.at,
                "traceback": self.traceback}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunFailure:
        try:
            source = FailureSource(d.get("source", FailureSource.RUN.value))
        except ValueError:
            source = FailureSource.RUN
        return cls(source=source, backend=str(d.get("backend") or ""), error=str(d.get("error") or ""),
                   cause=str(d.get("cause") or ""), finished=tuple(str(i) for i in d.get("finished") or ()),
                   unfinished=tuple(str(i) for i in d.get("unfinished") or ()), at=str(d.get("at") or ""),
                   traceback=str(d.get("traceback") or ""))


def write_failure(run_dir: str | Path, failure: RunFailure) -> Path:
    """Write ``failure.json`` into ``run_dir`` (whole or not at all: a temporary file, then a rename)."""
    text = json.dumps(failure.to_dict(), indent=2) + "\n"
    return replace_atomically(Path(run_dir) / FAILURE_FILE, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def read_failure(run_dir: str | Path) -> RunFailure | None:
    """The run's failure record, or None (no file, or one that cannot be read: logged)."""
    path = Path(run_dir) / FAILURE_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: cannot read the failure record (%s)", path, exc)
        return None
    return RunFailure.from_dict(data) if isinstance(data, dict) else None


def clear_failure(run_dir: str | Path) -> bool:
    """Remove ``failure.json`` (the run has caught up); True when there was one."""
    try:
        (Path(run_dir) / FAILURE_FILE).unlink()
    except FileNotFoundError:
        return False
    return True
