"""The append-only JSONL log every resumable run writes: durable appends that survive a torn last line."""

from __future__ import annotations

import json

import pytest

from jupiter.appendlog import append_record, read_records, repair_tail, replace_atomically, write_records


def test_append_after_a_torn_line_keeps_the_new_record(tmp_path):
    path = tmp_path / "log.jsonl"
    append_record(path, {"id": 1})
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"id": 2, "half')  # a run killed mid-write
    append_record(path, {"id": 3})
    assert [r["id"] for r in read_records(path)] == [1, 3]
    assert path.read_text().endswith('{"id": 3}\n')


def test_reader_skips_torn_and_foreign_lines(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"id": 1}\nnot json\n[1, 2]\n\n{"id": 2}\n{"id": 3, "to')
    assert [r["id"] for r in read_records(path)] == [1, 2]
    assert list(read_records(tmp_path / "missing.jsonl")) == []


def test_repair_tail_cuts_only_an_incomplete_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text('{"id": 1}\n')
    assert repair_tail(path) == 0 and path.read_text() == '{"id": 1}\n'
    path.write_text('{"id": 1}\n{"id"')
    assert repair_tail(path) == 5 and path.read_text() == '{"id": 1}\n'
    path.write_text("")
    assert repair_tail(path) == 0
    assert repair_tail(tmp_path / "missing") == 0


def test_write_records_replaces_atomically_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "sub" / "out.jsonl"
    write_records(path, [{"a": 1}, {"b": object()}], default=str)
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"a": 1} and "object" in json.loads(lines[1])["b"]
    write_records(path, [{"c": 3}])
    assert path.read_text() == '{"c": 3}\n'
    assert sorted(p.name for p in path.parent.iterdir()) == ["out.jsonl"]


def test_a_failed_replace_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "tree.json"
    replace_atomically(path, lambda tmp: tmp.write_text("old"), durable=True)

    def fails_halfway(tmp):
        tmp.write_text("half a fi")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_atomically(path, fails_halfway)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["tree.json"]
