"""The files of a solved task and of a tree still growing, as every way of running a task writes them."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
from viewer_trees import decided, wide_tree

from search.outputs import write_json_atomic, write_outputs, write_partial
from search.tree_io import load_tree


def test_result_json_holds_the_returned_record_and_names_the_notebook(tmp_path: Path) -> None:
    result = decided(wide_tree(20))
    written = write_outputs(result, tmp_path / "run", {"llm": "replay:x.json"})
    on_disk = json.loads((tmp_path / "run" / "result.json").read_text(encoding="utf-8"))
    assert json.loads(json.dumps(written.record, default=str)) == on_disk
    assert on_disk["llm"] == "replay:x.json" and on_disk["answer"] == result.answer
    assert on_disk["solution_notebook"] == "solution.ipynb" and on_disk["no_answer"] is False
    assert len(load_tree(written.path("tree.json")).nodes) == len(result.tree.nodes)
    nbformat.validate(nbformat.read(str(written.path("solution.ipynb")), as_version=4))
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == \
        ["result.json", "solution.ipynb", "tree.html", "tree.json"]  # no temporary file left behind


def test_a_run_without_an_answer_still_writes_the_notebook_and_says_so(tmp_path: Path) -> None:
    result = decided(wide_tree(10))
    result.answer, result.interrupted = None, True
    written = write_outputs(result, tmp_path)
    assert written.record["no_answer"] is True
    first = nbformat.read(str(tmp_path / "solution.ipynb"), as_version=4).cells[0]
    assert first.cell_type == "markdown" and "No answer found" in first.source and "stopped early" in first.source


def test_a_growing_tree_has_its_tree_files_and_no_result_yet(tmp_path: Path) -> None:
    tree = wide_tree(12)
    write_partial(tree, tmp_path, "titanic", "running: 3 iterations")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tree.html", "tree.json"]
    assert "running: 3 iterations" in (tmp_path / "tree.html").read_text(encoding="utf-8")
    assert len(load_tree(tmp_path / "tree.json").nodes) == 12


def test_json_files_are_replaced_whole(tmp_path: Path) -> None:
    path = write_json_atomic({"a": 1}, tmp_path / "summary.json")
    write_json_atomic({"b": [1, 2]}, path)
    assert json.loads(path.read_text(encoding="utf-8")) == {"b": [1, 2]}
    assert [p.name for p in tmp_path.iterdir()] == ["summary.json"]
