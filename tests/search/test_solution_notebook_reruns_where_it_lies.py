"""The solution notebook a run writes re-runs in its run folder: its inputs lie beside it (hard links, else
copies, else a first cell that links them), so Run All (here: nbclient, as ``jupyter nbconvert --execute``
does) reproduces the answer."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from jupiter.cli import main
from search.notebook_inputs import input_cells, place_inputs

EXAMPLES = Path(__file__).resolve().parents[2] / "jupiter" / "examples"
EXAMPLE = EXAMPLES / "titanic_mean_fare.json"
DATA = EXAMPLES / "data" / "test_ave.csv"


def execute_in(folder: Path, notebook_file: Path | None = None) -> nbformat.NotebookNode:
    """Run every cell of ``folder``'s notebook in a fresh kernel whose working folder is ``folder``."""
    notebook = nbformat.read(str(notebook_file or folder / "solution.ipynb"), as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(folder)}},
                   allow_errors=False).execute()
    return notebook


def printed(notebook: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for c in notebook.cells if c.cell_type == "code" for o in c.outputs
                   if o.get("output_type") == "stream")


def test_the_demos_notebook_reruns_in_its_run_folder_with_hard_linked_inputs(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    code = main(["solve", str(EXAMPLE), "--llm", f"replay:{EXAMPLES / 'titanic_mean_fare.replay.json'}",
                 "--iterations", "12", "--expansions", "3", "--out", str(out), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert (out / "test_ave.csv").stat().st_ino == DATA.resolve().stat().st_ino  # a hard link, no copy
    assert json.loads((out / "result.json").read_text())["inputs"] == {"test_ave.csv": "hard link"}
    notebook = execute_in(out)
    assert "34.6" in printed(notebook)  # the answer's number, computed again by the rerun
    data_cell = notebook.cells[1]
    assert data_cell.cell_type == "markdown" and "test_ave.csv" in data_cell.source and str(DATA.resolve()) in \
        data_cell.source


def test_an_input_that_cannot_be_linked_is_copied_and_a_large_one_is_linked_by_a_first_cell(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    small, large = tmp_path / "src" / "small.csv", tmp_path / "src" / "large.csv"
    small.parent.mkdir()
    small.write_text("a\n1\n2\n")
    large.write_text("b\n" + "5\n" * 100)
    run = tmp_path / "run"
    run.mkdir()

    def no_link(source, target):
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", no_link)
    placed = place_inputs([small, large], run, reserved=("tree.json",), max_copy_bytes=100)
    assert [(p.name, p.how) for p in placed] == [("small.csv", "copy"), ("large.csv", "symlink cell")]
    assert (run / "small.csv").read_text() == small.read_text() and not (run / "large.csv").exists()
    notebook = nbformat.v4.new_notebook(cells=[
        *input_cells(placed),
        nbformat.v4.new_code_cell("import pandas as pd\nprint(pd.read_csv('small.csv').a.sum(), "
                                  "pd.read_csv('large.csv').b.sum())")])
    (run / "solution.ipynb").write_text(nbformat.writes(notebook))
    assert printed(execute_in(run)).split() == ["3", "500"]
    assert (run / "large.csv").is_symlink()
    again = place_inputs([small, large], run, max_copy_bytes=100)  # a rerun of the run in the same folder
    assert [p.how for p in again] == ["already there", "already there"]


def test_an_input_named_like_a_run_file_is_not_placed_and_the_notebook_says_so(tmp_path: Path) -> None:
    source = tmp_path / "tree.json"
    source.write_text("[]")
    run = tmp_path / "run"
    run.mkdir()
    placed = place_inputs([source], run, reserved=("tree.json",))
    assert placed[0].how == "name taken" and not (run / "tree.json").exists()
    assert "NOT placed" in input_cells(placed)[0].source
