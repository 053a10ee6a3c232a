"""The task schema shared by every part of Jupiter, and loaders for the formats tasks arrive in.

A task is what the root of a search tree holds: a question about some data files, the constraints and the
answer format the model must follow, and (for trajectory collection and scoring) a reference label.
Search, the NbQA pipeline and the benchmark runners all read tasks through this module so that a task means
the same thing everywhere.

Formats read:
- our own task JSON (``Task.to_dict()``: ``id, question, constraints, format, files, label, ...``);
- an NbQA record (the paper's fields: ``task, file_names, constraints, format, label, ...``);
- a DABench question (``id, question, constraints, format, file_name, concepts, level``), optionally with
  its label record (``common_answers``) merged in or given separately;
- an AIME record (``id, problem, answer``);
- a DSBench data-modeling task folder (``task/<name>.txt`` + ``data_resplit/<name>/``).
"""

from __future__ import annotations

import ast
import enum
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from jupiter.answers import ANSWER_PATTERN, format_answers

__all__ = [
    "Task",
    "TaskKind",
    "TaskError",
    "load_task_file",
    "load_tasks",
    "task_from_record",
    "task_from_nbqa",
    "task_from_dabench",
    "task_from_aime",
    "task_from_dsbench",
    "read_jsonl",
    "read_setup",
    "SUBMISSION_FORMAT",
]

SUBMISSION_FORMAT = "@submission_file[submission.csv]"
AIME_FORMAT = "@answer[integer] where integer is the final answer, an integer from 0 to 999."


class TaskError(ValueError):
    """A task file or record is unusable; the message names the file and the problem."""


class TaskKind(str, enum.Enum):
    """What kind of answer ends a solution."""

    QA = "qa"  # closed-form answers in @name[value] form, compared with the label
    SUBMISSION = "submission"  # a file written to the workspace (DSBench), scored by a metric
    MATH = "math"  # an integer answer (AIME); the tools are there for computation


@dataclass(frozen=True)
class Task:
    """One data-analysis task: the root of a search tree.

    ``files`` are absolute paths of the input data files; the sandbox shows them to the code under their
    base names in the working directory. ``label`` is the reference answer in ``@name[value]`` form (None
    when unknown, e.g. at inference time or for submission tasks).
    """

    id: str
    question: str
    constraints: str = ""
    format: str = ""
    files: tuple[Path, ...] = ()
    label: str | None = None
    concepts: tuple[str, ...] = ()
    level: str = ""
    kind: TaskKind = TaskKind.QA
    metadata: Mapping[str, Any] = field(default_factory=dict)
    setup: str = ""
    """Code run once in the root state before the search (imports, data loading): every node starts from its
    result instead of the model re-deriving it, and the model sees the code in the task turn."""
    setup_output: str | None = None
    """What ``setup`` printed (its observation text); set by the search driver once it has run."""

    def __post_init__(self) -> None:
        if not str(self.id).strip():
            raise TaskError("task: 'id' is empty")
        if not self.question.strip():
            raise TaskError(f"task {self.id}: 'question' is empty")
        if not isinstance(self.setup, str):
            raise TaskError(f"task {self.id}: 'setup' must be code text (a string or a list of lines)")
        if self.setup_output is not None and not isinstance(self.setup_output, str):
            raise TaskError(f"task {self.id}: 'setup_output' must be text")
        if self.label is not None and self.kind is not TaskKind.SUBMISSION:
            if not ANSWER_PATTERN.search(self.label):
                raise TaskError(
                    f"task {self.id}: label {self.label!r} has no @name[value] answer in it"
                )

    @property
    def file_names(self) -> tuple[str, ...]:
        """The names the code sees in its working directory."""
        return tuple(p.name for p in self.files)

    def missing_files(self) -> list[Path]:
        """Every input file that does not exist (empty when all are there)."""
        return [p for p in self.files if not p.is_file()]

    def with_files_checked(self, looked_in: Sequence[Path] = ()) -> Task:
        """Return self, or raise TaskError listing every missing data file, where it looked, and the fix."""
        missing = self.missing_files()
        if missing:
            listed = ", ".join(p.name for p in missing)
            folders = ", ".join(str(f) for f in (looked_in or sorted({p.parent for p in missing})))
            raise TaskError(f"task {self.id}: data file(s) not found: {listed} (looked in {folders}); "
                            "pass --data-dir DIR naming the folder that holds them")
        return self

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (our task-file layout); ``load_task_file`` reads it back."""
        return {
            "id": self.id,
            "question": self.question,
            "constraints": self.constraints,
            "format": self.format,
            "files": [str(p) for p in self.files],
            "label": self.label,
            "concepts": list(self.concepts),
            "level": self.level,
            "kind": self.kind.value,
            "metadata": dict(self.metadata),
            **({"setup": self.setup} if self.setup else {}),
            **({"setup_output": self.setup_output} if self.setup_output is not None else {}),
        }

    def replace(self, **changes: Any) -> Task:
        return replace(self, **changes)


# --------------------------------------------------------------------------------------------- helpers


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file; errors name the file and line."""
    path = Path(path)
    records = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TaskError(f"{path}: cannot read ({exc.strerror or exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
    return records


def read_setup(path: str | Path) -> str:
    """The code of a ``--setup`` file (a setup cell run in the root state of every task); errors name it."""
    try:
        code = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"--setup {path}: cannot read it ({exc})") from None
    if not code.strip():
        raise TaskError(f"--setup {path}: the file is empty")
    return code


def _as_name_list(value: Any, where: str) -> list[str]:
    """NbQA stores file names as a list or as the string repr of a list; accept both (and one name)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise TaskError(f"{where}: file names {text!r} are not a list") from None
        else:
            return [text]
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    raise TaskError(f"{where}: file names must be a list of strings, got {type(value).__name__}")


def _resolve(names: Iterable[str], bases: Sequence[Path]) -> tuple[Path, ...]:
    """Resolve each name against the first base folder that has it (else the first base)."""
    resolved = []
    for name in names:
        candidate = Path(name).expanduser()
        if candidate.is_absolute():
            resolved.append(candidate)
            continue
        found = next((b / candidate for b in bases if (b / candidate).is_file()), None)
        if found is None:
            found = next(
                (b / candidate.name for b in bases if (b / candidate.name).is_file()), bases[0] / candidate
            )
        resolved.append(found.resolve() if found.exists() else found)
    return tuple(resolved)


def _label_from_common_answers(common: Any, where: str) -> str:
    if not isinstance(common, list) or not all(isinstance(a, (list, tuple)) and len(a) == 2 for a in common):
        raise TaskError(f"{where}: 'common_answers' must be a list of [name, value] pairs")
    return format_answers({str(n): str(v) for n, v in common})


def _stable_id(record: Mapping[str, Any], question: str) -> str:
    """NbQA records carry no id: derive one that is the same in every process (not ``hash()``)."""
    digest = hashlib.sha1(question.encode("utf-8")).hexdigest()[:10]
    source = "/".join(str(record.get(k, "")) for k in ("github_repo", "ipynb_name") if record.get(k))
    return f"{source}#{digest}" if source else f"nbqa-{digest}"


def _require(record: Mapping[str, Any], key: str, where: str) -> str:
    value = record.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise TaskError(f"{where}: missing '{key}'")
    return str(value)


def _setup_code(record: Mapping[str, Any], where: str) -> str:
    """A record's optional ``setup`` cell: a string, or a list of lines (as in .ipynb sources)."""
    value = record.get("setup")
    if value is None:
        return ""
    if isinstance(value, list) and all(isinstance(line, str) for line in value):
        return "".join(line if line.endswith("\n") else line + "\n" for line in value).rstrip("\n")
    if not isinstance(value, str):
        raise TaskError(f"{where}: 'setup' must be code text (a string or a list of lines), "
                        f"got {type(value).__name__}")
    return value


# --------------------------------------------------------------------------------------------- loaders


def task_from_nbqa(record: Mapping[str, Any], bases: Sequence[Path], where: str = "record") -> Task:
    """An NbQA record (the paper's field names) → Task."""
    question = _require(record, "task", where)
    names = _as_name_list(record.get("file_names", record.get("data_files")), where)
    task_id = record.get("id") or record.get("task_id") or _stable_id(record, question)
    label = record.get("label")
    metadata = {k: record[k] for k in ("github_repo", "ipynb_name", "solution", "answer", "data_files") if k in record}
    return Task(
        id=str(task_id),
        question=question,
        constraints=str(record.get("constraints") or ""),
        format=str(record.get("format") or ""),
        files=_resolve(names, bases),
        label=str(label) if label not in (None, "") else None,
        concepts=tuple(record.get("concepts") or ()),
        level=str(record.get("difficulty") or record.get("level") or ""),
        kind=TaskKind.QA,
        metadata=metadata,
        setup=_setup_code(record, where),
    )


def task_from_dabench(
    question: Mapping[str, Any],
    label_record: Mapping[str, Any] | None,
    bases: Sequence[Path],
    where: str = "record",
) -> Task:
    """A DABench question (+ its label record, or ``common_answers`` inside the question) → Task."""
    text = _require(question, "question", where)
    if "id" not in question:
        raise TaskError(f"{where}: missing 'id'")
    label = question.get("label")
    common = (label_record or {}).get("common_answers", question.get("common_answers"))
    if common is not None:
        label = _label_from_common_answers(common, where)
    names = _as_name_list(question.get("file_name", question.get("files")), where)
    return Task(
        id=str(question["id"]),
        question=text,
        constraints=str(question.get("constraints") or ""),
        format=str(question.get("format") or ""),
        files=_resolve(names, bases),
        label=label or None,
        concepts=tuple(question.get("concepts") or ()),
        level=str(question.get("level") or ""),
        kind=TaskKind.QA,
        metadata={"benchmark": "dabench"},
    )


def task_from_aime(record: Mapping[str, Any], where: str = "record") -> Task:
    """An AIME record (``id, problem, answer``) → a math task answered as ``@answer[N]``."""
    problem = _require(record, "problem", where)
    answer = record.get("answer")
    return Task(
        id=str(record.get("id", "")) or where,
        question=problem,
        constraints="Use Python to compute or check any step. The answer is an integer from 0 to 999.",
        format=AIME_FORMAT,
        label=f"@answer[{int(answer)}]" if answer not in (None, "") else None,
        kind=TaskKind.MATH,
        metadata={"benchmark": "aime2025", "contest": record.get("contest", "")},
    )


def task_from_dsbench(root: str | Path, name: str, description: str | None = None) -> Task:
    """A DSBench data-modeling task from the official layout under ``root``.

    ``task/<name>.txt`` holds the competition text (or pass a simplified ``description``);
    ``data_resplit/<name>/`` holds train/test/sample-submission CSVs. The answer is a file.
    """
    root = Path(root)
    where = f"dsbench task {name!r} under {root}"
    text_path = root / "task" / f"{name}.txt"
    if description is None:
        if not text_path.is_file():
            raise TaskError(f"{where}: {text_path} not found")
        description = text_path.read_text(encoding="utf-8", errors="replace")
    data_dir = root / "data_resplit" / name
    if not data_dir.is_dir():
        raise TaskError(f"{where}: data folder {data_dir} not found")
    files = tuple(sorted(p.resolve() for p in data_dir.iterdir() if p.is_file()))
    sample = next((p.name for p in files if p.name.startswith("sample_submission")), None)
    constraints = (
        "Train a model on train.csv and predict for test.csv. Write the predictions to ./submission.csv"
        + (f" with exactly the columns and row order of {sample}." if sample else ".")
    )
    return Task(
        id=name,
        question=description.strip(),
        constraints=constraints,
        format=SUBMISSION_FORMAT,
        files=files,
        label=None,
        kind=TaskKind.SUBMISSION,
        metadata={"benchmark": "dsbench", "root": str(root)},
    )


def task_from_record(record: Mapping[str, Any], bases: Sequence[Path], where: str = "record") -> Task:
    """Any supported JSON record → Task, recognising the format by its fields."""
    if not isinstance(record, Mapping):
        raise TaskError(f"{where}: a task must be a JSON object, got {type(record).__name__}")
    if "task" in record and "question" not in record:
        return task_from_nbqa(record, bases, where)
    if "problem" in record and "question" not in record:
        return task_from_aime(record, where)
    if "question" in record and "files" in record and "file_name" not in record:
        kind = TaskKind(record.get("kind", "qa"))
        names = _as_name_list(record.get("files"), where)
        return Task(
            id=str(record.get("id") or where),
            question=_require(record, "question", where),
            constraints=str(record.get("constraints") or ""),
            format=str(record.get("format") or ""),
            files=_resolve(names, bases),
            label=record.get("label") or None,
            concepts=tuple(record.get("concepts") or ()),
            level=str(record.get("level") or ""),
            kind=kind,
            metadata=dict(record.get("metadata") or {}),
            setup=_setup_code(record, where),
            setup_output=record.get("setup_output"),
        )
    if "question" in record:
        return task_from_dabench(record, None, bases, where)
    raise TaskError(f"{where}: missing question (expected a 'question', 'task' or 'problem' field)")


def _bases(path: Path, data_dir: str | Path | None) -> list[Path]:
    bases = [path.parent.resolve()]
    if data_dir is not None:
        bases.insert(0, Path(data_dir).expanduser().resolve())
    return bases


def load_task_file(path: str | Path, data_dir: str | Path | None = None, check_files: bool = True) -> Task:
    """Read one task JSON file (NbQA, DABench, AIME or our layout).

    Relative data-file paths resolve against ``data_dir`` first, then the task file's folder.
    Raises TaskError with one line naming the file and the problem (not JSON, no question, missing data files,
    a label without ``@name[value]``).
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: task file not found")
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TaskError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except UnicodeDecodeError:
        raise TaskError(f"{path}: not a UTF-8 text file") from None
    try:
        task = task_from_record(record, _bases(path, data_dir), where=str(path))
        return task.with_files_checked(_bases(path, data_dir)) if check_files else task
    except TaskError as exc:
        message = str(exc)
        raise TaskError(message if message.startswith(str(path)) else f"{path}: {message}") from None


def load_tasks(
    path: str | Path,
    data_dir: str | Path | None = None,
    labels: str | Path | None = None,
    check_files: bool = True,
) -> list[Task]:
    """Read many tasks: a JSONL file, a JSON list, or one JSON task.

    ``labels`` is an optional JSONL of DABench label records (``id, common_answers``) joined by id.
    """
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"{path}: tasks file not found")
    text = path.read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as exc:
            raise TaskError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    elif stripped.startswith("{") and "\n{" not in stripped.strip():
        return [load_task_file(path, data_dir, check_files)]
    else:
        records = read_jsonl(path)
    label_by_id = {str(r["id"]): r for r in read_jsonl(labels)} if labels else {}
    bases = _bases(path, data_dir)
    tasks = []
    for number, record in enumerate(records, 1):
        where = f"{path}:{number}"
        if label_by_id and isinstance(record, Mapping) and "question" in record:
            task = task_from_dabench(record, label_by_id.get(str(record.get("id"))), bases, where)
        else:
            task = task_from_record(record, bases, where)
        tasks.append(task.with_files_checked(bases) if check_files else task)
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        raise TaskError(f"{path}: duplicate task ids: {', '.join(dupes[:10])}")
    return tasks
