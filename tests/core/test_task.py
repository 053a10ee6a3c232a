"""Task loaders on the real benchmark files, and the CLI's answer to bad task files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupiter.task import (
    Task,
    TaskError,
    TaskKind,
    load_task_file,
    load_tasks,
    read_jsonl,
    task_from_aime,
    task_from_dsbench,
)


def test_dabench_questions_with_labels_load(dabench_dir: Path):
    tasks = load_tasks(
        dabench_dir / "da-dev-questions.jsonl",
        data_dir=dabench_dir / "tables",
        labels=dabench_dir / "da-dev-labels.jsonl",
    )
    assert len(tasks) == 257
    first = tasks[0]
    assert first.id == "0" and first.label == "@mean_fare[34.65]"
    assert first.files[0].name == "test_ave.csv" and first.files[0].is_file()
    assert first.concepts == ("Summary Statistics",) and first.level == "easy"
    six = next(t for t in tasks if t.id == "6")
    assert six.label.count("@") == 4


def test_aime_records_load(shared_dir: Path):
    records = read_jsonl(shared_dir / "benchmarks" / "aime2025" / "aime2025.jsonl")
    tasks = [task_from_aime(r) for r in records]
    assert len(tasks) == 30 and tasks[0].label == "@answer[70]"
    assert all(t.kind is TaskKind.MATH and not t.files for t in tasks)


def test_nbqa_record_with_string_list_of_files(tmp_path: Path):
    (tmp_path / "sales.csv").write_text("a,b\n1,2\n")
    record = {
        "task": "What is the mean of a?",
        "file_names": "['sales.csv']",
        "constraints": "Round to 2 decimals.",
        "format": "@mean_a[value]",
        "label": "@mean_a[1.00]",
        "solution": [],
        "github_repo": "someone/repo",
        "ipynb_name": "nb.ipynb",
        "concepts": ["Summary Statistics"],
        "difficulty": "easy",
    }
    path = tmp_path / "task.json"
    path.write_text(json.dumps(record))
    task = load_task_file(path)
    assert task.files == ((tmp_path / "sales.csv").resolve(),)
    assert task.level == "easy" and task.metadata["github_repo"] == "someone/repo"
    again = load_task_file(path)
    assert again.id == task.id and task.id.startswith("someone/repo/nb.ipynb#")


def test_our_layout_round_trips(tmp_path: Path):
    (tmp_path / "d.csv").write_text("x\n1\n")
    task = Task(id="t1", question="q?", files=((tmp_path / "d.csv"),), label="@x[1]", concepts=("c",))
    path = tmp_path / "t.json"
    path.write_text(json.dumps(task.to_dict()))
    assert load_task_file(path) == task


def test_setup_cell_loads_from_text_or_lines_and_round_trips(tmp_path: Path):
    (tmp_path / "d.csv").write_text("x\n1\n")
    record = {"id": "s1", "question": "q?", "files": ["d.csv"],
              "setup": ["import pandas as pd", "df = pd.read_csv('d.csv')\n"]}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(record))
    task = load_task_file(path)
    assert task.setup == "import pandas as pd\ndf = pd.read_csv('d.csv')" and task.setup_output is None
    done = task.replace(setup_output="(1, 1)")
    path.write_text(json.dumps(done.to_dict()))
    assert load_task_file(path) == done
    nbqa = tmp_path / "nbqa.jsonl"
    nbqa.write_text(json.dumps({"id": "n1", "task": "q?", "file_names": ["d.csv"], "setup": "x = 1"}) + "\n")
    assert load_tasks(nbqa)[0].setup == "x = 1"
    assert "setup" not in Task(id="t", question="q").to_dict()  # absent unless used: old readers see no change


def test_a_bad_setup_cell_names_the_field(tmp_path: Path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"id": "s1", "question": "q?", "files": [], "setup": {"code": "x"}}))
    with pytest.raises(TaskError, match="'setup' must be code text"):
        load_task_file(path)


def test_data_dir_takes_precedence(tmp_path: Path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "f.csv").write_text("x\n")
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"id": 1, "question": "q", "file_name": "f.csv"}))
    with pytest.raises(TaskError, match="f.csv"):
        load_task_file(path)
    assert load_task_file(path, data_dir=tmp_path / "data").files[0].parent.name == "data"


def test_dsbench_layout(tmp_path: Path):
    (tmp_path / "task").mkdir()
    (tmp_path / "task" / "demo.txt").write_text("Predict y.")
    data = tmp_path / "data_resplit" / "demo"
    data.mkdir(parents=True)
    for name in ("train.csv", "test.csv", "sample_submission.csv"):
        (data / name).write_text("id,y\n1,0\n")
    task = task_from_dsbench(tmp_path, "demo")
    assert task.kind is TaskKind.SUBMISSION and task.format == "@submission_file[submission.csv]"
    assert set(task.file_names) == {"train.csv", "test.csv", "sample_submission.csv"}
    with pytest.raises(TaskError, match="missing"):
        task_from_dsbench(tmp_path, "missing")


@pytest.mark.parametrize(
    "content,message",
    [
        ("{not json", "not valid JSON"),
        ('{"id": 1, "constraints": "x"}', "missing question"),
        ('{"id": 1, "question": "  "}', "missing 'question'"),
        ('{"id": 1, "question": "q", "file_name": "nope.csv"}', "nope.csv"),
        ('{"id": 1, "question": "q", "label": "42"}', "no @name[value]"),
        ('{"task": "q", "file_names": ["a.csv", "b.csv"]}', "a.csv"),
    ],
)
def test_bad_task_files_give_one_clear_line(tmp_path: Path, content: str, message: str):
    path = tmp_path / "task.json"
    path.write_text(content)
    with pytest.raises(TaskError, match=message.replace("[", r"\[").replace("]", r"\]")):
        load_task_file(path)
    with pytest.raises(TaskError) as info:
        load_task_file(path)
    assert str(info.value).startswith(str(path)) and "\n" not in str(info.value)


def test_every_missing_file_is_listed(tmp_path: Path):
    path = tmp_path / "task.json"
    path.write_text('{"task": "q", "file_names": ["a.csv", "b.csv"]}')
    with pytest.raises(TaskError) as info:
        load_task_file(path)
    assert "a.csv" in str(info.value) and "b.csv" in str(info.value)


def test_duplicate_ids_rejected(tmp_path: Path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": 1, "question": "a"}\n{"id": 1, "question": "b"}\n')
    with pytest.raises(TaskError, match="duplicate task ids: 1"):
        load_tasks(path)
