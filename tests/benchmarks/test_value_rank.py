"""``jupiter value rank`` and ``auc``: how well a value model orders the nodes of saved DABench trees within a
question.

The AUCs and decisions on hand-made trees with a scorer that reads the reply (its logic, exactly), then the
command on a run folder: its JSON, and a clear error for a folder that is not a tree run. The slow value-model
test (tests/value_model/test_value_cli.py) ranks with a real trained model.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from benchmarks.value_rank import RankedNode, auc, kind_report, rank_trees
from jupiter.cli import main
from jupiter.task import Task
from search.tree import NodeStatus, TerminalReason, Tree
from search.tree_io import save_tree

# question 1's right answer is @x[1]; question 2's is @x[5]
LABELS = {"1": {"id": 1, "common_answers": [["x", "1"]]}, "2": {"id": 2, "common_answers": [["x", "5"]]}}


def _cell(tree: Tree, parent, reply: str):
    return tree.add_child(parent, thought=reply, reply=reply, code="1", status=NodeStatus.CODE_OK,
                          finish_reason="stop")


def _answer(tree: Tree, parent, value: str, reply: str):
    return tree.add_child(parent, thought=reply, reply=reply, final_answer=f"@x[{value}]", status=NodeStatus.ANSWER,
                          terminal=TerminalReason.ANSWER, finish_reason="stop")


def _trees() -> dict[str, Tree]:
    """Question 1: a good step leading to the right answer (twice wrong beside it, so the vote picks wrong);
    question 2: only a wrong answer."""
    one = Tree(Task(id="1", question="What is x?", format="@x[value]"))
    good = _cell(one, one.root, "v=0.9")
    bad = _cell(one, one.root, "v=0.1")
    _answer(one, good, "1", "v=0.8")
    _answer(one, bad, "2", "v=0.3")
    _answer(one, bad, "2", "v=0.2")
    two = Tree(Task(id="2", question="What is x?", format="@x[value]"))
    _answer(two, _cell(two, two.root, "v=0.5"), "4", "v=0.7")
    return {"1": one, "2": two}


def _reply_score(histories: list) -> list[float]:
    """The value a node's own reply names (its last assistant turn)."""
    out = []
    for messages in histories:
        last = [m["content"] for m in messages if m["role"] == "assistant"][-1]
        out.append(float(last.split("v=")[1].split()[0].rstrip(".,")))
    return out


def test_auc_counts_ties_half_and_needs_both_classes():
    assert auc([0.9, 0.1], [True, False]) == 1.0
    assert auc([0.5, 0.5], [True, False]) == 0.5
    assert auc([0.2, 0.4, 0.3], [True, False, False]) == 0.0
    assert auc([0.3, 0.4], [True, True]) is None


def test_nodes_are_ranked_within_their_question_and_decided_both_ways():
    nodes, picks = rank_trees(_trees(), LABELS, _reply_score)
    answers, live = kind_report(nodes, "answer"), kind_report(nodes, "live")
    assert (answers.nodes, answers.right, answers.mixed_trees, answers.pairs) == (4, 1, 1, 2)
    assert answers.within_tree_auc == 1.0  # in question 1 the right answer (0.8) is above both wrong ones
    assert answers.auc == 1.0  # question 2's wrong answer (0.7) is below it too
    assert (live.nodes, live.right, live.within_tree_auc) == (3, 1, 1.0)
    assert live.auc == 1.0
    # question 1: the vote takes @x[2] (2 of 3), the highest estimate @x[1]; question 2 has no right answer
    assert picks == {"trees_answered": 2, "any_right": 1, "vote_right": 0, "value_right": 1}


def test_a_model_that_orders_questions_but_not_nodes_scores_chance_within(monkeypatch):
    """The AUC over all nodes can flatter a model that only tells easy questions from hard ones."""
    trees = _trees()
    by_question = {id(trees["1"]): 0.9, id(trees["2"]): 0.1}
    current: list[float] = []

    def score(histories):
        return [current[0]] * len(histories)

    nodes = []
    for tree_id, tree in trees.items():
        current[:] = [by_question[id(tree)]]
        nodes += rank_trees({tree_id: tree}, LABELS, score)[0]
    live = kind_report(nodes, "live")
    assert live.within_tree_auc == 0.5 and live.auc > 0.5


def _node(tree: str, right: bool, value: float) -> RankedNode:
    return RankedNode(tree, "t", "answer", right, value)


def test_the_within_question_interval_spans_how_much_the_questions_disagree():
    one_question = [_node("a", True, 0.9), _node("a", False, 0.1)]
    report = kind_report(one_question, "answer")
    assert report.within_tree_auc == 1.0 and report.within_tree_interval == (1.0, 1.0)
    # four questions ordered right (one pair each) and four ordered wrong: the mean is 0.5, resamples range widely
    mixed = [n for q in range(8) for n in (_node(f"q{q}", True, 0.9 if q < 4 else 0.1),
                                           _node(f"q{q}", False, 0.5))]
    report = kind_report(mixed, "answer")
    low, high = report.within_tree_interval
    assert report.within_tree_auc == 0.5 and low < 0.3 and high > 0.7
    assert kind_report(mixed, "answer").within_tree_interval == (low, high)  # seeded: the same again
    # a question with no wrong answer adds no pair and no width
    assert kind_report(one_question + [_node("b", True, 0.2)], "answer").within_tree_interval == (1.0, 1.0)


def test_trees_of_one_question_from_two_runs_are_resampled_together():
    mixed = [n for q in range(8) for n in (_node(f"q{q}", True, 0.9 if q < 4 else 0.1), _node(f"q{q}", False, 0.5))]
    one_run = kind_report(mixed, "answer")
    # the same trees again as a second seed's run: twice the trees, but no more questions to tell the AUC by
    two_runs = [RankedNode(f"{run}/{n.tree}", n.tag, n.kind, n.right, n.value) for run in ("s0", "s1") for n in mixed]
    report = kind_report(two_runs, "answer")
    assert report.mixed_trees == 16 and report.pairs == 16 and report.within_tree_auc == 0.5
    assert report.within_tree_interval == one_run.within_tree_interval


def _bench_data(folder: Path) -> Path:
    (folder / "tables").mkdir(parents=True)
    (folder / "tables" / "t.csv").write_text("x\n1\n")
    (folder / "da-dev-questions.jsonl").write_text("".join(
        json.dumps({"id": i, "question": "What is x?", "constraints": "", "format": "@x[value]", "file_name": "t.csv",
                    "level": "easy", "concepts": ["Summary Statistics"]}) + "\n" for i in (1, 2)))
    (folder / "da-dev-labels.jsonl").write_text("".join(json.dumps(label) + "\n" for label in LABELS.values()))
    return folder


def _run_with_reply_scorer(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """A saved run of the two questions' trees, benchmark data for them, and a scorer that reads the reply."""
    run = tmp_path / "mcts-s0"
    for tree_id, tree in _trees().items():
        save_tree(tree, run / "trees" / f"{tree_id}.json")

    class Scorer:
        def evaluate(self, histories):
            return _reply_score(histories)

    monkeypatch.setattr("value_model.scorer.ValueScorer.load", lambda *args, **kwargs: Scorer())
    return run, _bench_data(tmp_path / "dabench")


def test_the_command_ranks_a_run_folder(tmp_path: Path, monkeypatch, capsys):
    run, data = _run_with_reply_scorer(tmp_path, monkeypatch)
    assert main(["value", "rank", str(tmp_path), str(run), "--data", str(data), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    kinds = {k["kind"]: k for k in report["kinds"]}
    assert kinds["answer"]["within_tree_auc"] == 1.0 and kinds["live"]["nodes"] == 3
    assert report["decisions"]["value_right"] == 1 and report["decisions"]["vote_right"] == 0
    assert kinds["answer"]["within_tree_interval"] == [1.0, 1.0]


def test_the_command_writes_each_scored_node_when_asked(tmp_path: Path, monkeypatch, capsys):
    run, data = _run_with_reply_scorer(tmp_path, monkeypatch)
    out = tmp_path / "nodes.jsonl"
    assert main(["value", "rank", str(tmp_path), str(run), "--data", str(data), "--nodes-out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 7 and set(rows[0]) == {"tree", "tag", "kind", "right", "value"}
    answers = sorted((r["value"], r["right"]) for r in rows if r["kind"] == "answer" and r["tree"] == "mcts-s0/1")
    assert answers == [(0.2, False), (0.3, False), (0.8, True)]
    assert "(1.0-1.0)" in capsys.readouterr().out  # the table's interval column



def test_saved_nodes_are_reported_again_without_a_model_and_two_runs_together(tmp_path: Path, monkeypatch, capsys):
    run, data = _run_with_reply_scorer(tmp_path, monkeypatch)
    out = tmp_path / "nodes.jsonl"
    assert main(["value", "rank", str(tmp_path), str(run), "--data", str(data), "--nodes-out", str(out),
                 "--json"]) == 0
    ranked = json.loads(capsys.readouterr().out)["kinds"]
    monkeypatch.setattr("value_model.scorer.ValueScorer.load", lambda *a, **k: pytest.fail("a model was loaded"))
    assert main(["value", "auc", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kinds"] == ranked  # the same report as the scoring run's
    # a second seed's run of the same questions, gzipped: its trees are its own, its questions the same
    second = tmp_path / "nodes-s1.jsonl.gz"
    with gzip.open(second, "wt") as f:
        f.writelines(line.replace('"mcts-s0/', '"mcts-s1/') + "\n" for line in out.read_text().splitlines())
    assert main(["value", "auc", str(out), str(second), "--json"]) == 0
    answer = next(k for k in json.loads(capsys.readouterr().out)["kinds"] if k["kind"] == "answer")
    assert answer["mixed_trees"] == 2 * next(k for k in ranked if k["kind"] == "answer")["mixed_trees"]


def test_saved_nodes_given_twice_or_malformed_are_named(tmp_path: Path, capsys):
    good = tmp_path / "nodes.jsonl"
    good.write_text(json.dumps({"tree": "r/1", "tag": "0", "kind": "answer", "right": True, "value": 0.5}) + "\n")
    assert main(["value", "auc", str(good), str(good)]) == 2
    assert "twice" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + json.dumps({"tree": "r/1", "tag": "1", "kind": "leaf", "right": 1,
                                                  "value": "0.2"}) + "\n")
    assert main(["value", "auc", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "kind" in err and "right" in err and "value" in err
    assert main(["value", "auc", str(tmp_path / "absent.jsonl")]) == 2
    assert "absent.jsonl: cannot read it" in capsys.readouterr().err

def test_a_nodes_out_path_that_is_a_folder_fails_before_any_scoring(tmp_path: Path, monkeypatch, capsys):
    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded before the output path was checked")

    monkeypatch.setattr("value_model.scorer.ValueScorer.load", no_load)
    data = _bench_data(tmp_path / "dabench")
    (tmp_path / "run" / "trees").mkdir(parents=True)
    assert main(["value", "rank", str(tmp_path), str(tmp_path / "run"), "--data", str(data),
                 "--nodes-out", str(tmp_path)]) == 2
    assert "--nodes-out" in capsys.readouterr().err


def test_a_folder_without_trees_is_named(tmp_path: Path, capsys):
    data = _bench_data(tmp_path / "dabench")
    (tmp_path / "react-s0").mkdir()
    assert main(["value", "rank", str(tmp_path), str(tmp_path / "react-s0"), "--data", str(data)]) == 2
    err = capsys.readouterr().err
    assert "react-s0" in err and "no trees/ folder" in err


@pytest.mark.parametrize("missing", ["da-dev-labels.jsonl"])
def test_missing_benchmark_data_is_named(tmp_path: Path, capsys, missing: str):
    data = _bench_data(tmp_path / "dabench")
    (data / missing).unlink()
    (tmp_path / "run" / "trees").mkdir(parents=True)
    assert main(["value", "rank", str(tmp_path), str(tmp_path / "run"), "--data", str(data)]) == 2
    assert missing in capsys.readouterr().err
