"""``jupiter.solve`` in a notebook: the shipped example notebook executes in a real kernel (nbclient, a replay
policy) and shows the answer, the vote and the tree viewer inline; DataFrames become the task's files; the
policy is loaded once per process; an interrupt returns what the tree had."""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from nbclient import NotebookClient

import jupiter
from jupiter import api
from jupiter.task import TaskError

EXAMPLES = Path(__file__).resolve().parents[2] / "jupiter" / "examples"
REPLAY = f"replay:{EXAMPLES / 'titanic_mean_fare.replay.json'}"
TASK = {"question": "Calculate the mean fare paid by the passengers.",
        "format": "@mean_fare[mean_fare_value] where \"mean_fare_value\" is a floating-point number rounded to two "
                  "decimal places.", "label": "@mean_fare[34.65]"}


def test_the_example_notebook_runs_and_shows_the_answer_vote_and_tree(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    notebook_file = tmp_path / "solve_in_a_notebook.ipynb"
    shutil.copy(EXAMPLES / "solve_in_a_notebook.ipynb", notebook_file)
    monkeypatch.setenv("JUPITER_LLM", REPLAY)  # the kernel inherits it: the notebook replays a scripted model
    notebook = nbformat.read(str(notebook_file), as_version=4)
    NotebookClient(notebook, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    code = [c for c in notebook.cells if c.cell_type == "code"]
    shown = [o for o in code[1].outputs if o.get("output_type") == "execute_result"]
    page = shown[0]["data"]["text/html"]
    assert "<b>Answer:</b> <code>@mean_fare[34.65]</code> ✓ right" in page
    assert "<td><code>@mean_fare[34.65]</code></td>" in page  # the vote table
    assert "<iframe srcdoc=" in page and "&lt;svg" in page  # the tree viewer of tree.html, inline
    printed = "".join(o.get("text", "") for o in code[2].outputs)
    assert printed.startswith("@mean_fare[34.65] True")
    run = next((tmp_path / "runs").iterdir())
    assert {"solution.ipynb", "tree.html", "tree.json", "result.json", "test_ave.csv"} <= {p.name for p in
                                                                                         run.iterdir()}


def test_dataframes_become_files_and_the_policy_is_loaded_once(tmp_path: Path) -> None:
    frame = pd.read_csv(EXAMPLES / "data" / "test_ave.csv")
    first = jupiter.solve(TASK["question"], data={"test_ave.csv": frame}, format=TASK["format"],
                          label=TASK["label"], llm=REPLAY, iterations=8, expansions=2, progress=False,
                          out=tmp_path / "a")
    assert first.answer == "@mean_fare[34.65]" and first.correct is True and first.vote_table
    assert pd.read_csv(tmp_path / "a" / "inputs" / "test_ave.csv").equals(frame)
    policy = api._POLICIES[REPLAY]
    second = jupiter.solve(TASK["question"], files=[EXAMPLES / "data" / "test_ave.csv"], llm=REPLAY,
                           iterations=4, progress=False, out=tmp_path / "b")
    assert api._POLICIES[REPLAY] is policy and second.correct is None  # no label, no verdict
    assert second.paths["notebook"].is_file() and second.notebook.cells


def test_bad_input_is_named(tmp_path: Path) -> None:
    with pytest.raises(TaskError, match="question is empty"):
        jupiter.solve("  ", llm=REPLAY)
    with pytest.raises(TaskError, match="a pandas DataFrame is needed"):
        jupiter.solve("q?", data={"x.csv": [1, 2]}, llm=REPLAY, out=tmp_path / "c")
    with pytest.raises(TaskError, match="not found|missing"):
        jupiter.solve("q?", files=[tmp_path / "nope.csv"], llm=REPLAY, out=tmp_path / "d")


def test_an_interrupt_returns_the_result_over_what_the_tree_had(tmp_path: Path) -> None:
    from jupiter.llm import load_policy

    replay = load_policy(REPLAY)

    class Interrupted:
        """The replay model, until the user interrupts the kernel during the third model call."""

        calls = 0

        def generate(self, histories, params):
            Interrupted.calls += 1
            if Interrupted.calls == 3:
                raise KeyboardInterrupt
            return replay.generate(histories, params)

    result = jupiter.solve(TASK["question"], files=[EXAMPLES / "data" / "test_ave.csv"], llm=Interrupted(),
                           iterations=12, expansions=2, progress=False, out=tmp_path / "e")
    assert result.interrupted and 1 < len(result.tree.nodes) and result.paths["result_json"].is_file()
    assert "interrupted" in result._repr_html_()
