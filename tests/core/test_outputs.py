"""``jupiter.output_paths``: the one output-path check every command makes before any work."""

from __future__ import annotations

import json

import pytest

from jupiter.output_paths import (
    OutputError,
    RunFolderState,
    check_output_file,
    check_output_folder,
    check_run_folder,
    move_previous_run,
)
from jupiter.task import TaskError

UNWRITABLE = "/proc/jupiter-outputs-test"  # not creatable even by root


def test_output_folder_accepts_new_and_existing_folders_and_keeps_their_files(tmp_path):
    (tmp_path / "done.txt").write_text("kept")
    assert check_output_folder(tmp_path) == tmp_path
    assert check_output_folder(tmp_path / "new" / "deeper") == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # the check creates nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done.txt"]  # and leaves no probe behind


def test_output_folder_refuses_a_file_and_an_unwritable_place(tmp_path):
    a_file = tmp_path / "f"
    a_file.write_text("x")
    with pytest.raises(OutputError, match="--out .*is an existing file"):
        check_output_folder(a_file)
    with pytest.raises(OutputError, match="is a file, so the folder cannot be created"):
        check_output_folder(a_file / "sub")
    with pytest.raises(OutputError, match="cannot create files in /proc"):
        check_output_folder(UNWRITABLE)
    assert issubclass(OutputError, TaskError)  # the CLI turns it into exit 2 and one line


def test_a_collection_refuses_a_file_as_its_out_before_ray_starts(tmp_path, capsys):
    from jupiter.commands.collect import main

    task = tmp_path / "task.json"
    task.write_text(json.dumps({"id": "t", "question": "q?", "label": "@x[1]"}))
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(SystemExit) as exit_:
        main(["--tasks", str(task), "--out", str(tmp_path / "taken")])
    assert exit_.value.code == 2
    assert f"--out {tmp_path / 'taken'}: is an existing file" in capsys.readouterr().err


def test_output_file_checks(tmp_path):
    assert check_output_file(tmp_path / "a" / "scores.jsonl", "-o") == tmp_path / "a" / "scores.jsonl"
    existing = tmp_path / "old.jsonl"
    existing.write_text("old")
    assert check_output_file(existing) == existing  # a file output is simply written again
    with pytest.raises(OutputError, match="-o .*is a folder"):
        check_output_file(tmp_path, "-o")
    with pytest.raises(OutputError, match="cannot create files"):
        check_output_file(f"{UNWRITABLE}/x.jsonl")


def test_run_folder_states(tmp_path):
    assert check_run_folder(tmp_path / "absent").state is RunFolderState.NEW
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_run_folder(empty).state is RunFolderState.NEW
    finished = tmp_path / "finished"
    finished.mkdir()
    (finished / "result.json").write_text(json.dumps({"interrupted": False}))
    with pytest.raises(OutputError, match="already holds a finished run.*--force"):
        check_run_folder(finished)
    assert check_run_folder(finished, force=True).state is RunFolderState.FORCED
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="already holds other files"):
        check_run_folder(other)
    stopped = tmp_path / "stopped"
    stopped.mkdir()
    (stopped / "result.json").write_text(json.dumps({"interrupted": True}))
    assert check_run_folder(stopped).state is RunFolderState.INTERRUPTED


def test_move_previous_run_keeps_every_file_and_earlier_restarts(tmp_path):
    run = tmp_path / "run"
    (run / "previous-20000101-000000").mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"interrupted": True}))
    (run / "tree.json").write_text("[]")
    target = move_previous_run(run)
    assert target.parent == run and target.name.startswith("previous-")
    assert sorted(p.name for p in target.iterdir()) == ["result.json", "tree.json"]
    assert sorted(p.name for p in run.iterdir()) == sorted(["previous-20000101-000000", target.name])
    assert check_run_folder(run).state is RunFolderState.NEW  # only set-aside runs left: a fresh start
    second = move_previous_run(run)  # same second: a distinct folder, nothing overwritten
    assert second != target and second.is_dir()
