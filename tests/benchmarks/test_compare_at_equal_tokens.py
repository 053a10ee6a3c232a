"""``jupiter bench compare --equal-tokens``: DABench arms at equal generated tokens, with where they fail.

Tree runs are scored by iteration, vote runs by paths, from saved run folders made here: the curve's logic on
hand-made trees (a word counter as the tokenizer), then the command on real run folders with the embedded
model's tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.equal_tokens import arm_curve, failures
from benchmarks.records import CandidateRecord, TaskRecord
from jupiter.cli import main
from jupiter.task import Task
from search.tree import NodeStatus, Tree
from search.tree_io import save_tree

LABELS = {"1": {"id": 1, "common_answers": [["x", "1"]]}}


def _words(text: str) -> int:
    return len(text.split())


def _answer(tree: Tree, parent, value: str):
    return tree.add_child(parent, reply=f"Formatted answer: @x[{value}]", final_answer=f"@x[{value}]",
                          status=NodeStatus.ANSWER, finish_reason="stop")


def _cell(tree: Tree, parent, words: int = 3, finish: str = "stop"):
    return tree.add_child(parent, reply=" ".join(["w"] * words), code="1", status=NodeStatus.CODE_OK,
                          finish_reason=finish)


def _row(tree: Tree, task_id: str = "1", answer: str | None = None) -> TaskRecord:
    cands = tuple(CandidateRecord(tag=n.tag, answer=n.final_answer, key=n.final_answer, value=0.0, iteration=None)
                  for n in tree.nodes if n.final_answer)
    return TaskRecord(id=task_id, benchmark="dabench", answer=answer, candidates=cands, iterations=3,
                      model_calls=3, seconds=1.5, stats={"completion_tokens": 7, "prompt_tokens": 40})


def _mcts_tree() -> Tree:
    """Iteration 1 expands the root; 2 finds one wrong answer; 3 finds two right ones."""
    tree = Tree(Task(id="1", question="What is x?", format="@x[value]"))
    a = _cell(tree, tree.root)
    b = _cell(tree, tree.root, words=5, finish="length")  # cut by max_tokens: no end-of-turn token
    _answer(tree, a, "2")
    _cell(tree, a)
    _answer(tree, b, "1")
    _answer(tree, b, "1")
    return tree


def _vote_tree() -> Tree:
    """Three paths: the first answers wrong, the second and third right."""
    tree = Tree(Task(id="1", question="What is x?", format="@x[value]"))
    paths = [_cell(tree, tree.root) for _ in range(3)]
    _answer(tree, paths[0], "2")
    _answer(tree, paths[1], "1")
    _answer(tree, _cell(tree, paths[2], words=7), "1")
    return tree


def test_tree_run_is_scored_as_if_it_had_stopped_after_each_iteration():
    tree = _mcts_tree()
    points = arm_curve("infer", 3, [_row(tree)], {"1": tree}, LABELS, _words)
    # iteration 1: 3 + 1 (stop) and 5 (cut); 2: answer 3 words + 1, cell 3 + 1; 3: two answers of 3 + 1
    assert [p.tokens for p in points] == [9, 17, 25]
    assert [p.right for p in points] == [0, 0, 1]  # iteration 2's only candidate is wrong; then 2 to 1
    assert [p.any_right for p in points] == [0, 0, 1]


def test_vote_run_with_its_first_k_paths():
    tree = _vote_tree()
    points = arm_curve("vote", 3, [_row(tree)], {"1": tree}, LABELS, _words)
    assert [p.tokens for p in points] == [8, 16, 32]
    # one path: its wrong answer; two: a tie, which goes to the earliest (wrong); three: right by 2 to 1
    assert [p.right for p in points] == [0, 0, 1]
    assert [p.any_right for p in points] == [0, 1, 1]


def test_a_result_without_its_tree_is_an_error_not_a_smaller_count():
    tree = _mcts_tree()
    with pytest.raises(ValueError, match="task 1 has a result but no tree"):
        arm_curve("infer", 3, [_row(tree)], {}, LABELS, _words)


def test_failures_count_replies_by_kind_and_code_errors_by_exception():
    tree = _mcts_tree()
    tree.add_child(tree.root, reply="x", code="df['y']", status=NodeStatus.CODE_ERROR, multiplicity=2,
                   observation="Traceback (most recent call last):\nKeyError: 'y'")
    tree.add_child(tree.root, reply="no code here", status=NodeStatus.NO_CODE)
    tree.add_child(tree.root, reply="Formatted answer: 1", final_answer="1", status=NodeStatus.ANSWER)
    found = failures([_row(tree, answer="@x[2]")], {"1": tree}, LABELS, {"1": "easy"})
    assert found.reply_kinds == {"code": 5, "answer": 3, "no_code": 1, "answer_without_format": 1}
    assert found.code_errors == {"KeyError": 2}
    assert (found.right, found.answered, found.wrong_logic) == (0, 1, 1)  # a well-formed answer, wrong values
    assert found.right_by_level == {"easy": (0, 1)} and found.format_valid_rate == 0.8


# ------------------------------------------------------------------------ the command on run folders


def _dabench(root: Path) -> Path:
    folder = root / "dabench"
    (folder / "tables").mkdir(parents=True)
    (folder / "tables" / "t.csv").write_text("x\n1\n", encoding="utf-8")
    questions = [{"id": 1, "question": "What is x?", "format": "@x[value]", "file_name": "t.csv", "level": "easy"},
                 {"id": 2, "question": "What is y?", "format": "@y[value]", "file_name": "t.csv", "level": "hard"}]
    labels = [{"id": 1, "common_answers": [["x", "1"]]}, {"id": 2, "common_answers": [["y", "5"]]}]
    (folder / "da-dev-questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (folder / "da-dev-labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    return folder


def _run_folder(root: Path, name: str, mode: str, trees: dict[str, Tree], answers: dict[str, str | None],
                benchmark: str = "dabench") -> Path:
    run = root / name
    (run / "trees").mkdir(parents=True)
    lines = []
    for task_id, tree in trees.items():
        save_tree(tree, run / "trees" / f"{task_id}.json")
        lines.append(json.dumps(_row(tree, task_id, answers[task_id]).to_dict()) + "\n")
    (run / "results.jsonl").write_text("".join(lines), encoding="utf-8")
    config = {"mode": mode, "iterations": 3, "vote_runs": 3, "leaves_per_step": 1}
    (run / "run.json").write_text(json.dumps({"benchmark": benchmark, "config": config}), encoding="utf-8")
    return run


def _wrong_tree() -> Tree:
    """Question 2: one cell, then a wrong answer."""
    tree = Tree(Task(id="2", question="What is y?", format="@y[value]"))
    tree.add_child(_cell(tree, tree.root), reply="Formatted answer: @y[4]", final_answer="@y[4]",
                   status=NodeStatus.ANSWER, finish_reason="stop")
    return tree


@pytest.fixture(scope="module")
def tokenizer():
    """The embedded model's real tokenizer (the command's default)."""
    from transformers import AutoTokenizer

    from jupiter.default_model import ModelError, ensure_default_model

    try:
        folder = ensure_default_model()
    except ModelError as exc:  # pragma: no cover - the suite's other model tests need it too
        pytest.skip(f"embedded model unavailable: {exc}")
    return AutoTokenizer.from_pretrained(str(folder))


def _tokens(tokenizer, tree: Tree, upto: set[str] | None = None) -> int:
    return sum(len(tokenizer(n.reply or "", add_special_tokens=False)["input_ids"]) + (n.finish_reason == "stop")
               for n in tree.nodes if n.parent is not None and (upto is None or n.tag in upto))


def test_the_command_compares_real_run_folders_at_equal_tokens(tmp_path, capsys, tokenizer):
    data = _dabench(tmp_path)
    mcts = _run_folder(tmp_path, "mcts", "infer", {"1": _mcts_tree(), "2": _wrong_tree()}, {"1": "@x[1]", "2": "@y[4]"})
    vote = _run_folder(tmp_path, "vote", "vote", {"1": _vote_tree()}, {"1": "@x[1]"})
    with open(mcts / "results.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"id": "3", "candi')  # a line the running bench is still writing
    before = (mcts / "results.jsonl").read_bytes()
    plot = tmp_path / "abq-vs-tokens.png"

    assert main(["bench", "compare", "--equal-tokens", str(mcts), str(vote), "--data", str(data), "--json",
                 "--plot", str(plot)]) == 0
    arms = {a["name"]: a for a in json.loads(capsys.readouterr().out)["arms"]}
    assert (mcts / "results.jsonl").read_bytes() == before  # read, never repaired or appended
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    m, v = arms["mcts"], arms["vote"]
    assert (m["mode"], m["unit"], m["tasks"], v["unit"], v["tasks"]) == ("infer", "iterations", 2, "paths", 1)
    assert [p["right"] for p in m["points"]] == [0, 0, 1] and [p["right"] for p in v["points"]] == [0, 0, 1]
    assert [p["any_right"] for p in v["points"]] == [0, 1, 1]
    # iteration 1: the root's two children, and question 2's first cell
    assert m["points"][0]["tokens"] == (_tokens(tokenizer, _mcts_tree(), {"0.1", "0.2"})
                                        + _tokens(tokenizer, _wrong_tree(), {"0.1"}))
    assert m["points"][-1]["tokens"] == _tokens(tokenizer, _mcts_tree()) + _tokens(tokenizer, _wrong_tree())
    assert v["points"][-1]["tokens"] == _tokens(tokenizer, _vote_tree())
    assert (m["abq"], m["run_tokens"], m["model_calls"]) == (0.5, 14, 6)
    assert m["failures"]["right_by_level"] == {"easy": {"right": 1, "tasks": 1}, "hard": {"right": 0, "tasks": 1}}
    assert (m["failures"]["answered"], m["failures"]["wrong_logic"]) == (2, 1)

    assert main(["bench", "compare", "--equal-tokens", str(mcts), str(vote), "--data", str(data)]) == 0
    table = capsys.readouterr().out
    assert "| mcts | 2 | 0.500 (1) | 1.00 | 0.00 |" in table  # ABQ, then per level: easy, hard
    assert "| vote | 3 paths |" in table and "| mcts | 1 iteration |" in table
    assert "Tokens at the full budget, re-tokenised: mcts" in table


def test_the_command_refuses_what_it_cannot_compare_by_name(tmp_path, capsys):
    data = _dabench(tmp_path)
    aime = _run_folder(tmp_path, "aime", "infer", {"1": _mcts_tree()}, {"1": None}, benchmark="aime")
    assert main(["bench", "compare", "--equal-tokens", str(tmp_path / "none"), "--data", str(data)]) == 2
    assert "no results.jsonl" in capsys.readouterr().err
    (tmp_path / "a-file").write_text("")
    assert main(["bench", "compare", "--equal-tokens", str(aime), "--data", str(data),
                 "--plot", str(tmp_path / "a-file" / "curve.png")]) == 2  # before any work
    assert "--plot" in capsys.readouterr().err
    assert main(["bench", "compare", "--equal-tokens", str(aime), "--data", str(data)]) == 2
    assert "benchmark 'aime'; only DABench runs are compared here" in capsys.readouterr().err
    assert main(["bench", "compare", str(aime), "--tokenizer", "somewhere"]) == 2
    assert "--tokenizer is for --equal-tokens" in capsys.readouterr().err


def test_a_run_of_another_benchmark_is_refused_by_name(tmp_path):
    from benchmarks.dabench import load_dabench
    from benchmarks.equal_tokens import load_arm

    run = _run_folder(tmp_path, "aime", "infer", {"1": _mcts_tree()}, {"1": None}, benchmark="aime")
    with pytest.raises(ValueError, match="benchmark 'aime'"):
        load_arm(run, load_dabench(_dabench(tmp_path)), _words)
