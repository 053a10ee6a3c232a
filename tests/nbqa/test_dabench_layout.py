"""NbQA tasks written in DABench's folder layout load with the benchmark's own loader (so `jupiter bench dabench
--data DIR --mode collect` collects value-model trees on training tasks), with their labels as the scored
answers; tasks the layout cannot hold are skipped and counted, and bad input is named."""

from __future__ import annotations

import json

from benchmarks.dabench import dabench_correct, load_dabench
from jupiter.cli import main
from nbqa_pipeline.dabench_layout import write_dabench_layout


def _record(task_id: str, files: list[str], label: str) -> dict:
    return {"id": task_id, "task": f"What is the mean of x? ({task_id})", "file_names": files, "label": label,
            "concepts": ["Summary Statistics"], "difficulty": "easy", "constraints": "Round to two decimals.",
            "format": "@mean_x[value] where value is rounded to two decimals."}


def test_tasks_load_with_the_benchmark_loader_and_score_by_their_label(tmp_path):
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / "a.csv").write_text("x\n1\n2\n", encoding="utf-8")
    records = [_record("synth-1", ["a.csv"], "@mean_x[1.5] @rows[2]"),
               _record("synth-2", ["a.csv", "b.csv"], "@mean_x[1]"),  # two files: DABench has one
               _record("synth-3", ["missing.csv"], "@mean_x[1]"),
               _record("synth-4", ["a.csv"], "no answer here")]
    report = write_dabench_layout(records, tables, tmp_path / "bench")
    assert (report.written, report.skipped_files, report.skipped_label) == (1, 2, 1)
    data = load_dabench(tmp_path / "bench")
    (task,) = data.tasks
    assert task.id == "synth-1" and task.level == "easy" and task.files[0].read_text() == "x\n1\n2\n"
    assert dabench_correct("@mean_x[1.50] @rows[2]", data.labels[0])
    assert not dabench_correct("@mean_x[1.5]", data.labels[0])  # every sub-answer counts, as DABench


def test_the_command_writes_the_folder_and_names_a_missing_tables_folder(tmp_path, capsys):
    source = tmp_path / "synth"
    (source / "tables").mkdir(parents=True)
    (source / "tables" / "a.csv").write_text("x\n1\n", encoding="utf-8")
    nbqa = source / "nbqa.jsonl"
    nbqa.write_text("".join(json.dumps(_record(f"t{i}", ["a.csv"], "@mean_x[1]")) + "\n" for i in range(3)),
                    encoding="utf-8")
    assert main(["nbqa", "to-dabench", str(nbqa), "--out", str(tmp_path / "bench"), "--limit", "2"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["written"] == 2
    assert len(load_dabench(tmp_path / "bench").tasks) == 2
    assert main(["nbqa", "to-dabench", str(nbqa), "--tables", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "other")]) == 2
    assert "nope: no such folder" in capsys.readouterr().err
