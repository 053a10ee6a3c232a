"""How well a value model's estimates order a run's tree nodes: over the run, within one question, and as a
decision against the vote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.quality import value_ranking
from jupiter.task import Task
from search.tree import NodeStatus, TerminalReason, Tree
from search.tree_io import save_tree

LABELS = {"1": {"id": 1, "common_answers": [["x", "1"]]}, "2": {"id": 2, "common_answers": [["x", "1"]]}}


def _cell(tree: Tree, parent, value: float | None, status: NodeStatus = NodeStatus.CODE_OK):
    return tree.add_child(parent, reply="Thought: t\nAction:\n```python\n1\n```", thought="t", code="1",
                          observation="1", status=status, finish_reason="stop", evaluation=value)


def _answer(tree: Tree, parent, answer: str, value: float | None):
    return tree.add_child(parent, reply=f"Thought: done\nFormatted answer: @x[{answer}]", thought="done",
                          final_answer=f"@x[{answer}]", status=NodeStatus.ANSWER, terminal=TerminalReason.ANSWER,
                          finish_reason="stop", evaluation=value)


def _tree(qid: str, right_value: float, wrong_value: float, wrong_answers: int = 1) -> Tree:
    """root → a → right answer; root → b → wrong answer(s); a and b carry the answers' estimates."""
    tree = Tree(Task(id=qid, question="What is x?", format="@x[value]"))
    a = _cell(tree, tree.root, right_value)
    b = _cell(tree, tree.root, wrong_value)
    for _ in range(wrong_answers):
        _answer(tree, b, "2", wrong_value)
    _answer(tree, a, "1", right_value)
    return tree


def test_live_nodes_are_right_when_a_right_answer_lies_below_and_failures_are_left_out():
    tree = _tree("1", 0.5, -0.5)
    failed = tree.add_child(tree.root, reply="no code", status=NodeStatus.NO_CODE, terminal=TerminalReason.NO_CODE,
                            evaluation=-1.0)
    nodes = {n.tag: n for n in value_ranking.ranked_nodes("1", tree, LABELS["1"])}
    assert failed.tag not in nodes and tree.root.tag not in nodes
    assert [(n.kind, n.right) for n in (nodes["0.1"], nodes["0.2"])] == [("live", True), ("live", False)]
    assert {(n.kind, n.right, n.value) for n in nodes.values() if n.kind == "answer"} == {
        ("answer", True, 0.5), ("answer", False, -0.5)}


def test_a_model_that_only_ranks_questions_scores_well_over_the_run_and_at_chance_within_a_tree():
    """Question 1's nodes all get high estimates, question 2's all low, the wrong answers a little above the right
    ones in each: over the run the AUC is high, within each tree the order is wrong."""
    nodes = (value_ranking.ranked_nodes("1", _tree("1", 0.8, 0.9), LABELS["1"])
             + value_ranking.ranked_nodes("2", _tree("2", -0.9, -0.8, wrong_answers=3), LABELS["2"]))
    report = value_ranking.kind_report(nodes, "answer")
    assert (report.nodes, report.right, report.mixed_trees, report.pairs) == (6, 2, 2, 1 + 3)
    assert report.within_tree_auc == 0.0
    assert report.auc == pytest.approx(3 / 8)  # right 0.8 beats the three wrong -0.8 only
    flipped = value_ranking.kind_report(
        value_ranking.ranked_nodes("1", _tree("1", 0.9, 0.8), LABELS["1"]), "answer")
    assert flipped.within_tree_auc == 1.0


def test_the_value_decision_is_counted_against_the_vote_and_scores_replace_stored_estimates():
    trees = {"1": _tree("1", 0.9, -0.9, wrong_answers=2)}  # the vote picks the wrong "2" (2 to 1)
    assert value_ranking.decisions(trees, None, LABELS) == {
        "trees_answered": 1, "any_right": 1, "vote_right": 0, "trees_with_estimates": 1, "value_right": 1}
    right_tag = trees["1"].answers()[-1].tag
    wrong_tag = trees["1"].answers()[0].tag
    scored = {("1", right_tag): -0.3, ("1", wrong_tag): 0.2}
    assert value_ranking.decisions(trees, scored, LABELS)["value_right"] == 0


def _data_folder(root: Path) -> Path:
    data = root / "dabench"
    (data / "tables").mkdir(parents=True)
    (data / "tables" / "t.csv").write_text("x\n1\n", encoding="utf-8")
    questions = [{"id": i, "question": "What is x?", "constraints": "", "format": "@x[value]", "file_name": "t.csv",
                  "level": "easy", "concepts": ["Summary Statistics"]} for i in (1, 2)]
    (data / "da-dev-questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    (data / "da-dev-labels.jsonl").write_text("".join(json.dumps(l) + "\n" for l in LABELS.values()),
                                              encoding="utf-8")
    return data


def test_states_written_for_scoring_read_back_as_that_scoring(tmp_path, capsys):
    """A run made without a value model: write its states, score them (here by hand), report the scores."""
    run = tmp_path / "run"
    (run / "trees").mkdir(parents=True)
    for qid, right_value in (("1", None), ("2", None)):
        save_tree(_tree(qid, right_value, right_value), run / "trees" / f"{qid}.json")
    data = _data_folder(tmp_path)
    states = tmp_path / "states.jsonl"
    assert value_ranking.main([str(run), "--data", str(data), "--write-states", str(states), "--kind", "live"]) == 0
    rows = [json.loads(line) for line in states.read_text(encoding="utf-8").splitlines()]
    assert [(r["tree"], r["tag"], r["right"]) for r in rows] == [("1", "0.1", True), ("1", "0.2", False),
                                                                ("2", "0.1", True), ("2", "0.2", False)]
    # the path as the search scores it: the cell's reply, then its output
    assert rows[0]["messages"][-2]["role"] == "assistant" and "```python\n1\n```" in rows[0]["messages"][-2]["content"]
    assert rows[0]["messages"][-1] == {"role": "user", "content": "Observation:\n1"}
    assert rows[0]["messages"][0]["role"] == "system"
    capsys.readouterr()
    scores = tmp_path / "scores.jsonl"
    scores.write_text("".join(json.dumps({**r, "value": 0.5 if r["right"] else -0.5}) + "\n" for r in rows),
                      encoding="utf-8")
    assert value_ranking.main([str(run), "--data", str(data), "--scores", str(scores), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    live = next(k for k in report["kinds"] if k["kind"] == "live")
    assert (live["nodes"], live["auc"], live["within_tree_auc"], live["mixed_trees"]) == (4, 1.0, 1.0, 2)
    answer = next(k for k in report["kinds"] if k["kind"] == "answer")
    assert answer["nodes"] == 0 and report["decisions"]["trees_with_estimates"] == 0  # answers were not scored
    assert report["decisions"]["vote_right"] == 0  # 1 to 1: the tie goes to the earliest, the wrong "2"


def test_a_scores_file_that_is_not_value_score_output_is_named(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "trees").mkdir(parents=True)
    save_tree(_tree("1", 0.1, 0.2), run / "trees" / "1.json")
    bad = tmp_path / "scores.jsonl"
    bad.write_text('{"value": 0.3}\n', encoding="utf-8")
    assert value_ranking.main([str(run), "--data", str(_data_folder(tmp_path)), "--scores", str(bad)]) == 2
    assert "scores.jsonl, line 1: expected 'tree', 'tag' and 'value'" in capsys.readouterr().err
