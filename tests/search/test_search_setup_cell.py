"""A task's setup cell runs once in the root state (real sandbox); every branch starts from its result."""

from __future__ import annotations

from pathlib import Path

from jupiter.llm import ReplayPolicy
from jupiter.task import Task
from search import Mode, SearchConfig, run_search
from search.export import path_notebook
from search.html import render_tree_html
from search.tree_io import load_tree, save_tree

SETUP = "import pandas as pd\ndf = pd.read_csv('d.csv')\nprint('SETUP-ROWS', len(df))"


def _step(code: str) -> str:
    return f"Thought: use the loaded frame.\nAction:\n```python\n{code}\n```\n"


def _task(tmp_path: Path, setup: str) -> Task:
    csv = tmp_path / "d.csv"
    csv.write_text("x\n1\n2\n3\n")
    return Task(id="setup-1", question="Mean of x? [SETUP-TASK]", format="@mean_x[value]", files=(csv,),
                label="@mean_x[2.0]", setup=setup)


def test_setup_runs_once_and_the_model_sees_its_output(tmp_path: Path, sandbox) -> None:
    # The only way to the answer uses `df` without loading it: it exists only if the setup ran in the root.
    policy = ReplayPolicy(rules=[
        {"match": "SETUP-ROWS 3", "replies": [_step("print('MEAN', df['x'].mean())")]},
        {"match": "MEAN 2.0", "replies": ["Thought: done.\nFormatted answer: @mean_x[2.0]"]},
    ], default=["Thought: lost."])
    task = _task(tmp_path, SETUP)
    runs_before = sandbox.stats().runs
    result = run_search(task, policy, sandbox, SearchConfig(mode=Mode.COLLECT, iterations=4, expansions=1))
    assert result.error is None and result.correct is True
    code_nodes = [n for n in result.tree.nodes if n.code]
    assert sandbox.stats().runs - runs_before == 1 + len(code_nodes)  # the setup ran once, not once per node
    first_prompt = result.tree.messages(result.tree.root)[1]["content"]
    assert "```python\n" + SETUP + "\n```" in first_prompt and "Setup output:\nSETUP-ROWS 3" in first_prompt
    # The tree file keeps the setup and its output, so the saved prompts are the ones the model read.
    path = save_tree(result.tree, tmp_path / "tree.json")
    loaded = load_tree(path)
    assert loaded.task.setup_output.strip() == "SETUP-ROWS 3"

    # The solution notebook starts with the setup cell (with its output) and reruns to the same answer.
    for tree in (result.tree, loaded):
        cells = [c for c in path_notebook(tree, result.chosen_tag).cells if c.cell_type == "code"]
        assert [c.source for c in cells] == [SETUP, "print('MEAN', df['x'].mean())"]
        assert cells[0].outputs[0]["text"] == "SETUP-ROWS 3\n"
    page = render_tree_html(loaded, chosen_tag=result.chosen_tag)
    assert "SETUP-ROWS 3" in page and "Setup cell, run once" in page  # the root shows the setup and its output
    fresh = sandbox.open_root(input_files=list(task.files))
    for cell in cells:
        execution = fresh.run(cell.source, timeout=60)
    assert execution.stdout == "MEAN 2.0\n"


def test_a_failing_setup_ends_the_tree_naming_it(tmp_path: Path, sandbox) -> None:
    task = _task(tmp_path, "import pandas as pd\ndf = pd.read_csv('missing.csv')")
    result = run_search(task, ReplayPolicy(rules=[], default=["Thought: x"]), sandbox,
                        SearchConfig(mode=Mode.COLLECT, iterations=2, expansions=1))
    assert result.error is not None and "setup cell failed (error)" in result.error
    assert "FileNotFoundError" in result.error and len(result.tree.nodes) == 1
