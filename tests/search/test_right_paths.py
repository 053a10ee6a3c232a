"""Self-training rows from labelled trees: each right answer's path becomes one SFT row in the layout `jupiter sft`
reads, in the chat the search showed the model, with the steps that raised kept out of the loss."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from search_dabench import final, step

from jupiter.llm import ReplayPolicy
from jupiter.sft.data import read_sharegpt
from search import Mode, SearchConfig, run_search
from search.right_paths import RightPathsConfig, collect_right_paths, right_path_rows
from search.tree import NodeStatus
from search.tree_io import save_tree


def _rules() -> list[dict]:
    """From the task: a step that raises (then the load that fixes it), the load itself, or a guessed wrong
    answer; after the load the right computation, then the right answer."""
    load = step("Load the data.", "import pandas as pd\ndf = pd.read_csv('test_ave.csv')\nprint('LOADED', df.shape)")
    return [
        {"match": "DABENCH-0", "replies": [step("Look at the data.", "print(df.head())"), load,
                                           final("@mean_fare[30.00]")], "logprobs": [-0.2, -0.3, -0.9]},
        {"match": "name 'df' is not defined", "replies": [load]},
        {"match": "LOADED", "replies": [step("Compute it.", "print('RESULT', round(df['Fare'].mean(), 2))")]},
        {"match": "RESULT", "replies": [final("@mean_fare[34.65]")]},
    ]


@pytest.fixture(scope="module")
def tree(dabench_tasks, sandbox):
    config = SearchConfig(mode=Mode.COLLECT, iterations=12, expansions=3, cell_timeout=60)
    return run_search(dabench_tasks[0], ReplayPolicy(rules=_rules(), default=["Thought: lost."]), sandbox, config,
                      seed=0).tree


def test_each_right_answer_becomes_a_row_in_the_searchs_own_chat(tree, tmp_path):
    right, chats = [], set()  # the first node of each distinct right chat (K samples of one reply repeat it)
    for node in tree.nodes:
        if node.is_answer and node.evaluation > 0 and repr(tree.messages(node)) not in chats:
            chats.add(repr(tree.messages(node)))
            right.append(node)
    assert len(right) == 2  # through the failed step and without it
    assert any(n.is_answer and n.evaluation < 0 for n in tree.nodes)  # the guess
    rows = right_path_rows(tree, "t0")
    assert [r["id"] for r in rows] == [f"t0:{n.tag}" for n in right]
    for row, node in zip(rows, right):
        messages = tree.messages(node)
        assert row["system"] == messages[0]["content"]
        assert [c["value"] for c in row["conversations"]] == [m["content"] for m in messages[1:]]
        assert row["conversations"][-1]["value"].endswith("Formatted answer: @mean_fare[34.65]")
    # `jupiter sft` reads the rows; the failed step is in the context but out of the loss, the fix is in it
    path = tmp_path / "right.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    read = {c.id: c for c in read_sharegpt(path)}
    fixed = next(r for r in rows if r["no_loss_turns"])
    assert fixed["no_loss_turns"] == [1] and "print(df.head())" in fixed["conversations"][1]["value"]
    assert "NameError" in fixed["conversations"][2]["value"]
    assert read[fixed["id"]].no_loss == frozenset({2})  # conversation turn 1 is message 2 (after the system)
    clean = next(r for r in rows if not r["no_loss_turns"])
    assert len(clean["conversations"]) == 6 and len(fixed["conversations"]) == 8


def test_paths_are_capped_per_tree_and_counted(tree, tmp_path):
    files = [save_tree(tree, tmp_path / "a.json"), save_tree(tree, tmp_path / "b.json")]
    rows, report = collect_right_paths(files, RightPathsConfig(max_per_tree=1))
    assert [r["id"].split(":")[0] for r in rows] == ["a", "b"]
    answers = 2 * sum(n.is_answer and n.evaluation > 0 for n in tree.nodes)
    assert (report.trees, report.right_answers, report.rows, report.over_cap) == (2, answers, 2, 2)
    assert report.duplicate_paths == answers - 4  # two distinct right chats per tree
    rows, report = collect_right_paths(files)
    assert (report.rows, report.rows_with_fixed_error, report.steps_out_of_loss) == (4, 2, 2)
    assert report.steps == sum(len(r["conversations"]) // 2 for r in rows)


def test_an_unreadable_file_is_skipped_and_named(tree, tmp_path):
    path = save_tree(tree, tmp_path / "t.json")
    (tmp_path / "cut.json").write_text(path.read_text()[:100])
    rows, report = collect_right_paths([tmp_path / "cut.json", path])
    assert len(rows) == 2 and list(report.skipped_files) == [str(tmp_path / "cut.json")]
    assert "not valid JSON" in report.skipped_files[str(tmp_path / "cut.json")]


def _nbqa(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "jupiter.cli", "nbqa", "right-paths", *args], capture_output=True,
                          text=True, timeout=120)


def test_the_command_writes_the_rows_and_refuses_bad_input(tree, tmp_path):
    path = save_tree(tree, tmp_path / "trees" / "0.json")
    out = tmp_path / "sft" / "right.jsonl"
    proc = _nbqa(str(path), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == 2 and len(read_sharegpt(out)) == 2
    proc = _nbqa(str(tmp_path / "nope.json"), "-o", str(out))
    assert proc.returncode == 2 and "no such tree file" in proc.stderr and "nope.json" in proc.stderr
    for node in tree.nodes:  # a tree with no right answer (e.g. searched without labels)
        if node.is_answer:
            node.evaluation = -1.0
    wrong_only = save_tree(tree, tmp_path / "wrong.json")
    for node in tree.nodes:
        if node.is_answer and node.final_answer.endswith("[34.65]"):
            node.evaluation = 1.0
    proc = _nbqa(str(wrong_only), "-o", str(tmp_path / "none.jsonl"))
    assert proc.returncode == 2 and "no tree holds a right answer" in proc.stderr
    assert not (tmp_path / "none.jsonl").exists()
    assert NodeStatus.CODE_ERROR in {n.status for n in tree.nodes}
