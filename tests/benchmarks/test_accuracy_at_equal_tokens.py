"""Arms compared at equal generated tokens: tree runs by iteration, vote runs by paths, from saved runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.quality import equal_budget
from benchmarks.records import CandidateRecord, TaskRecord
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


def _row(tree: Tree) -> TaskRecord:
    cands = tuple(CandidateRecord(tag=n.tag, answer=n.final_answer, key=n.final_answer, value=0.0, iteration=None)
                  for n in tree.nodes if n.final_answer)
    return TaskRecord(id="1", benchmark="dabench", answer=None, candidates=cands, iterations=3,
                      stats={"completion_tokens": 7})


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


def test_tree_run_is_scored_as_if_it_had_stopped_after_each_iteration():
    tree = _mcts_tree()
    curve = equal_budget.arm_curve("mcts", "infer", 3, [_row(tree)], {"1": tree}, LABELS, _words)
    assert curve.unit == "iterations"
    # iteration 1: 3 + 1 (stop) and 5 (cut); 2: answer 3 words + 1, cell 3 + 1; 3: two answers of 3 + 1
    assert [p.tokens for p in curve.points] == [9, 17, 25]
    assert [p.right for p in curve.points] == [0, 0, 1]  # iteration 2's only candidate is wrong; then 2 to 1
    assert [p.any_right for p in curve.points] == [0, 0, 1]


def test_vote_run_with_its_first_k_paths():
    tree = Tree(task=None)
    paths = [_cell(tree, tree.root) for _ in range(3)]
    _answer(tree, paths[0], "2")  # path 1 wrong, paths 2 and 3 right
    _answer(tree, paths[1], "1")
    _answer(tree, _cell(tree, paths[2], words=7), "1")
    curve = equal_budget.arm_curve("vote", "vote", 3, [_row(tree)], {"1": tree}, LABELS, _words)
    assert curve.unit == "paths"
    assert [p.tokens for p in curve.points] == [8, 16, 32]
    # one path: its wrong answer; two: a tie, which goes to the earliest (wrong); three: right by 2 to 1
    assert [p.right for p in curve.points] == [0, 0, 1]
    assert [p.any_right for p in curve.points] == [0, 1, 1]


def test_a_result_without_its_tree_is_an_error_not_a_smaller_count():
    tree = _mcts_tree()
    with pytest.raises(ValueError, match="task 1 has a result but no tree"):
        equal_budget.arm_curve("mcts", "infer", 3, [_row(tree)], {}, LABELS, _words)


def _run_folder(root: Path, tree: Tree, mode: str, benchmark: str = "dabench") -> Path:
    run = root / mode
    (run / "trees").mkdir(parents=True)
    save_tree(tree, run / "trees" / "1.json")
    (run / "results.jsonl").write_text(json.dumps(_row(tree).to_dict()) + "\n", encoding="utf-8")
    config = {"mode": mode, "iterations": 3, "vote_runs": 3, "leaves_per_step": 1}
    (run / "run.json").write_text(json.dumps({"benchmark": benchmark, "config": config}), encoding="utf-8")
    return run


def test_a_saved_run_folder_reads_back_to_the_same_curve_and_is_left_as_it_was(tmp_path):
    tree = _mcts_tree()
    run = _run_folder(tmp_path, tree, "infer")
    with open(run / "results.jsonl", "a", encoding="utf-8") as handle:
        handle.write('{"id": "2", "candi')  # a line the running bench is still writing
    before = (run / "results.jsonl").read_bytes()
    curve = equal_budget.load_arm("mcts", run, LABELS, _words)
    assert curve == equal_budget.arm_curve("mcts", "infer", 3, [_row(tree)], {"1": tree}, LABELS, _words)
    assert (run / "results.jsonl").read_bytes() == before


def test_a_run_of_another_benchmark_is_refused_by_name(tmp_path):
    run = _run_folder(tmp_path, _mcts_tree(), "infer", benchmark="aime")
    with pytest.raises(ValueError, match="benchmark 'aime'"):
        equal_budget.load_arm("mcts", run, LABELS, _words)


def test_the_policy_tokenizer_counts_a_reply_as_the_model_generated_it():
    """The embedded model's real tokenizer: a reply of known pieces re-tokenises to its token count."""
    from transformers import AutoTokenizer

    from jupiter.default_model import ModelError, ensure_default_model

    try:
        folder = ensure_default_model()
    except ModelError as exc:  # pragma: no cover - the suite's other model tests need it too
        pytest.skip(f"embedded model unavailable: {exc}")
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    reply = "Thought: load the file.\nAction:\n```python\nimport pandas as pd\n```"
    ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == reply  # the count is of exactly this text, no BOS added
    count = equal_budget._token_counter(str(folder))
    assert count(reply) == len(ids) > 5


def test_a_plot_path_in_a_missing_folder_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        equal_budget.main(["mcts=nowhere", "--plot", str(tmp_path / "missing" / "curve.png")])
    assert exit_info.value.code == 2
    assert "missing" in capsys.readouterr().err


def test_tokens_on_the_x_axis_draw_a_png(tmp_path):
    from benchmarks.curves import Curve
    from benchmarks.report import plot_curves

    path = plot_curves([Curve("mcts", (9, 17, 25), (0.0, 0.0, 1.0)), Curve("vote", (8, 16, 32), (0.0, 0.0, 1.0))],
                       tmp_path / "tokens.png", "ABQ against generated tokens", xlabel="generated tokens")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
