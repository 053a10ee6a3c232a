"""What a submitted job is made of, checked before it is accepted: its settings, its file names, its task.

Every check raises ``SubmissionError`` whose message names the bad field or file, and whose ``status`` is the
HTTP status the API answers with. Nothing here touches the database or the driver.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from jupiter.task import Task, TaskError, task_from_record
from search.config import ConfigError, SearchConfig
from search.settings import JobSettings, parse_job_settings, resolve_settings

__all__ = ["SubmissionError", "JobSpec", "parse_settings", "check_file_name", "load_job_task",
           "search_config", "JOB_ID_PATTERN", "job_paths", "JobPaths", "as_job_task", "effective_settings",
           "parse_task_json"]

JOB_ID_PATTERN = re.compile(r"^[0-9a-f]{32}$")


class SubmissionError(ValueError):
    """A submission is refused; ``status`` is the HTTP status (400 unless said otherwise)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class JobPaths:
    """The folder of one job: ``task.json``, ``files/`` (its data, all the sandbox sees) and ``output/``."""

    root: Path

    @property
    def task(self) -> Path:
        return self.root / "task.json"

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def output(self) -> Path:
        return self.root / "output"


def job_paths(data_root: Path, job_id: str) -> JobPaths:
    """The folder of ``job_id`` (checked against the id pattern, so an id never walks out of ``data_root``)."""
    if not JOB_ID_PATTERN.match(job_id):
        raise SubmissionError(f"job id {job_id!r} is not a job id", status=404)
    return JobPaths(Path(data_root) / job_id)


@dataclass(frozen=True)
class JobSpec:
    """A job as the driver runs it: the task (its id replaced by the job id, so that two jobs of the same task
    never share a tree), the original task id, the search settings and the seed."""

    job_id: str
    task: Task
    task_id: str
    config: SearchConfig
    seed: int
    paths: JobPaths


def parse_settings(text: str | None) -> dict[str, Any]:
    """The ``settings`` form field (a ``search.settings.JobSettings`` as JSON) → the settings given, as a dict
    (unknown keys, wrong types and values out of range refused; null means not given)."""
    if text is None or not text.strip():
        return {}
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"settings: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(raw, dict):
        raise SubmissionError(f"settings: must be a JSON object, got {type(raw).__name__}")
    try:
        settings = parse_job_settings(raw)
    except ConfigError as exc:
        raise SubmissionError(str(exc)) from None
    return settings.model_dump(mode="json", exclude_unset=True, exclude_none=True)


def search_config(settings: Mapping[str, Any], profile: str, max_trees: int,
                  cell_timeout: float | None) -> SearchConfig:
    """The job's ``SearchConfig``: the profile's settings for its mode with the job's settings on top, and the
    server's trees in flight and cell time limit (None: the profile's).

    Memoised on the settings' JSON (they came as JSON, a request's or the store's; ``SearchConfig`` is frozen,
    so sharing one is safe): most jobs send the same few settings, and resolving a profile is a fifth of a
    submit's CPU time on the event loop."""
    return _cached_search_config(json.dumps(settings, sort_keys=True), profile, max_trees, cell_timeout)


@functools.lru_cache(maxsize=256)
def _cached_search_config(settings_json: str, profile: str, max_trees: int, cell_timeout: float | None) -> SearchConfig:
    return _search_config(json.loads(settings_json), profile, max_trees, cell_timeout)


def _search_config(settings: Mapping[str, Any], profile: str, max_trees: int,
                   cell_timeout: float | None) -> SearchConfig:
    try:
        return resolve_settings(parse_job_settings(settings), profile, max_trees_in_flight=max_trees,
                                cell_timeout=cell_timeout)
    except ConfigError as exc:  # a setting out of range, or settings that do not fit together
        message = str(exc).replace("SearchConfig.", "settings.")
        raise SubmissionError(message if message.startswith("settings") else f"settings: {message}") from None


def effective_settings(config: SearchConfig, requested: Mapping[str, Any]) -> dict[str, Any]:
    """Every per-job setting as the search will use it (what the job reports and what a restart rebuilds)."""
    used = config.to_dict()
    return {key: int(requested.get("seed") or 0) if key == "seed" else used[key] for key in JobSettings.model_fields}


def check_file_name(name: str | None) -> str:
    """A data file's name as uploaded: a plain base name (no folders, no ``..``, no NUL, no leading dot)."""
    if not name:
        raise SubmissionError("files: an uploaded file has no name")
    bad = None
    if "/" in name or "\\" in name:
        bad = "contains a path separator"
    elif "\x00" in name:
        bad = "contains a NUL byte"
    elif ".." in name:
        bad = "contains '..'"
    elif name.startswith("."):
        bad = "starts with a dot"
    elif len(name.encode("utf-8")) > 255:
        bad = "is longer than 255 bytes"
    elif any(ord(c) < 32 for c in name):
        bad = "contains a control character"
    if bad:
        raise SubmissionError(f"files: file name {name!r} {bad}; send plain file names")
    return name


def load_job_task(paths: JobPaths, record: Mapping[str, Any] | None = None) -> Task:
    """The job's task with its data files resolved in the job's ``files/`` folder only; uploaded files the task
    does not name are added after its own. ``record`` is the task JSON already parsed (a submit has it);
    without it ``task.json`` is read (a restart).

    Any data file the task names that is not in ``files/`` (not uploaded, or a path pointing elsewhere on the
    server) is refused, listed by name: a job can never read another job's files or the server's.

    Why no path is resolved per file here: this runs once per submit on the server's one registration thread,
    where reading task.json back and resolving paths seven times a submit (an ``lstat`` per path component) took
    more than half of the registration's CPU. ``files/`` is resolved once; its regular files, listed once, are
    the only ones a task may name (a link there, which only someone with the server's rights could make,
    counts as not uploaded).
    """
    if record is None:
        record = _read_task_json(paths.task)
    try:
        task = task_from_record(record, [paths.files], where="task")
    except TaskError as exc:
        message = str(exc)
        raise SubmissionError(message if message.startswith("task") else f"task: {message}") from None
    files_dir = os.path.realpath(paths.files)
    uploaded = {entry.name for entry in os.scandir(files_dir) if entry.is_file(follow_symlinks=False)}
    missing: list[str] = []
    own: list[str] = []
    for named in map(str, task.files):
        # named by an absolute or unusual path: decided on its real path
        path = named if os.path.dirname(named) == files_dir else os.path.realpath(named)
        if os.path.dirname(path) == files_dir and os.path.basename(path) in uploaded:
            own.append(os.path.basename(path))
        else:
            missing.append(os.path.basename(named))
    if missing:
        raise SubmissionError(f"task: data file(s) not uploaded: {', '.join(missing)} "
                              f"(send each as a 'files' field)")
    # files uploaded with the job but not named by the task are the user's data too: the notebook sees them
    names = own + sorted(uploaded - set(own))
    return replace(task, files=tuple(Path(files_dir) / name for name in names))


def parse_task_json(text: str) -> Any:
    """The ``task`` field's JSON (a submit) or a job's task.json (a restart), refused with the line at fault."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SubmissionError(f"task: not valid JSON (line {exc.lineno}: {exc.msg})") from None


def _read_task_json(path: Path) -> Any:
    try:
        return parse_task_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SubmissionError("task: the job's task.json is gone") from None
    except UnicodeDecodeError:
        raise SubmissionError("task: not a UTF-8 text file") from None


def as_job_task(task: Task, job_id: str) -> Task:
    """The task the driver sees: the job id as its id (prompts never show the id), the original kept."""
    return replace(task, id=job_id, metadata={**dict(task.metadata), "task_id": task.id})
