"""Training-set extraction on hand-built trees (ours and the paper's format): exact samples and labels."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from jupiter.prompts import GEMMA, render_prompt
from value_model.extract import (
    ExtractConfig,
    ExtractError,
    extract_samples,
    is_infrastructure_failure,
    read_samples,
    select_tags,
    write_samples,
)

SYSTEM = {"role": "system", "content": "You are a data analyst."}
TASK = {"role": "user", "content": "Task: mean of a?"}


def _step(i: int) -> list[dict]:
    return [{"role": "assistant", "content": f"Thought: step {i}\nAction:\n```python\nprint({i})\n```"},
            {"role": "user", "content": f"Observation:\n{i}"}]


def _answer(text: str) -> list[dict]:
    return [{"role": "assistant", "content": f"Thought: done\nFormatted answer: @mean[{text}]"}]


def _node(tag, messages, visits, value_sum, terminal=False, **extra):
    return {"tag": tag, "depth": tag.count("."), "messages": messages, "is_terminal": terminal,
            "visit_count": visits, "value_sum": value_sum,
            "value": value_sum / visits if visits else 0.0, **extra}


def our_tree() -> dict:
    """root 0 ── 0.1 (code) ── 0.1.1 answer correct (+1)
                           └── 0.1.2 answer wrong (−1)
              ├─ 0.2 (code) ── 0.2.1 timeout (infrastructure, −1: must be skipped)
              ├─ 0.3 answer with Q = 0 (neither correct nor wrong)
              └─ 0.4 unvisited answer (no label)"""
    root = [SYSTEM, TASK]
    return {"task": {"id": "t"}, "nodes": [
        _node("0", root, 4, 0.0, status="root"),
        _node("0.1", root + _step(1), 2, 0.0, status="code-ok"),
        _node("0.1.1", root + _step(1) + _answer("1"), 1, 1.0, True, status="answer", final_answer="@mean[1]",
              reward=1.0),
        _node("0.1.2", root + _step(1) + _answer("2"), 1, -1.0, True, status="answer", final_answer="@mean[2]",
              reward=-1.0),
        _node("0.2", root + _step(2), 1, -1.0, status="code-ok"),
        _node("0.2.1", root + _step(2) + _step(3), 1, -1.0, True, status="infrastructure", exec_status="timeout"),
        _node("0.3", root + _answer("3"), 1, 0.0, True, status="answer"),
        _node("0.4", root + _answer("4"), 0, 0.0, True, status="answer"),
    ]}


def test_our_tree_gives_exactly_the_expected_samples(tmp_path: Path) -> None:
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(our_tree()))
    samples = extract_samples([path])
    got = {s.sources[0].split("#")[1]: (s.value, s.visits, s.is_terminal) for s in samples}
    assert got == {"0": (0.0, 4, False), "0.1": (0.0, 2, False), "0.1.1": (1.0, 1, True),
                   "0.1.2": (-1.0, 1, True)}
    by_tag = {s.sources[0].split("#")[1]: s for s in samples}
    assert by_tag["0.1.1"].text == render_prompt(by_tag["0.1.1"].messages, GEMMA)
    assert list(by_tag["0.1.2"].messages) == [SYSTEM, TASK] + _step(1) + _answer("2")


def test_tree_centred_targets_subtract_each_trees_own_mean(tmp_path: Path) -> None:
    mixed, good = our_tree(), our_tree()
    for node in good["nodes"]:  # another task, every answer right: root and 0.1 have Q +1, both answers +1
        node["messages"][1] = {"role": "user", "content": "Task: mean of b?"}
        if node["tag"] in ("0", "0.1", "0.1.2"):
            node["value_sum"] = float(node["visit_count"])
    (tmp_path / "mixed.json").write_text(json.dumps(mixed))
    (tmp_path / "good.json").write_text(json.dumps(good))
    files = [tmp_path / "mixed.json", tmp_path / "good.json"]
    raw = {s.sources[0]: s.value for s in extract_samples(files)}
    centred = {s.sources[0]: s for s in extract_samples(files, ExtractConfig(target="tree-centred"))}
    assert raw["good.json#0.1.1"] == 1.0 and centred["good.json#0.1.1"].value == pytest.approx(0.0)
    assert centred["mixed.json#0.1.1"].value == 1.0 and centred["mixed.json#0.1.2"].value == -1.0  # mean 0
    for tree in ("mixed.json", "good.json"):
        values = [v for source, v in raw.items() if source.startswith(tree)]
        for source in (s for s in raw if s.startswith(tree)):
            assert centred[source].value == pytest.approx(raw[source] - sum(values) / len(values))
    assert centred["good.json#0"].visits == 4 and centred["good.json#0"].value_sum == 4.0  # raw statistics kept


def test_infrastructure_failures_are_recognised() -> None:
    assert is_infrastructure_failure({"status": "timeout", "messages": []})
    assert is_infrastructure_failure({"status": "memory_limit", "messages": []})
    assert is_infrastructure_failure({"exec_status": "died", "messages": []})
    assert is_infrastructure_failure({"terminal": "infrastructure", "messages": []})
    paper = [TASK, {"role": "assistant", "content": "x"},
             {"role": "user", "content": "Observation:\nCode execution failed with status: TimeLimitExceeded"}]
    assert is_infrastructure_failure({"messages": paper})
    assert not is_infrastructure_failure({"status": "code-error", "messages": [TASK]})


def _fan_tree(n_correct: int, n_wrong: int) -> list[dict]:
    root = [TASK]
    nodes = [_node("0", root, n_correct + n_wrong, float(n_correct - n_wrong))]
    for i in range(1, n_correct + 1):
        nodes.append(_node(f"0.{i}", root + _answer(f"c{i}"), 1, 1.0, True))
    for j in range(1, n_wrong + 1):
        nodes.append(_node(f"0.{n_correct + j}", root + _answer(f"w{j}"), 1, -0.5, True))
    return nodes


def test_sampling_caps_and_is_seeded() -> None:
    nodes = _fan_tree(6, 7)
    tags = select_tags(nodes, ExtractConfig(seed=3), random.Random("a"))
    values = {n["tag"]: n["value_sum"] for n in nodes}
    assert "0" in tags
    assert sum(values[t] > 0 for t in tags if t != "0") == 4
    assert sum(values[t] < 0 for t in tags if t != "0") == 4
    assert tags == select_tags(nodes, ExtractConfig(seed=3), random.Random("a"))


def test_at_most_two_wrong_when_none_is_correct() -> None:
    tags = select_tags(_fan_tree(0, 5), ExtractConfig(), random.Random(0))
    assert len(tags) == 3 and tags[0] == "0"


def test_paper_format_is_read(tmp_path: Path) -> None:
    """The paper's files: a JSON list of {tag, depth, messages, is_terminal, visit_count, value_sum, value}."""
    root = [SYSTEM, TASK]
    paper = [
        _node("0", root, 3, -1.0),
        _node("0.1", root + _step(1), 2, 0.0),
        _node("0.1.1", root + _step(1) + _answer("1"), 1, 1.0, True),
        _node("0.1.2", root + _step(1) + [{"role": "assistant", "content": "Thought: run\n```python\nx\n```"},
                                          {"role": "user", "content": "Observation:\nSandbox error: boom"}],
              1, -1.0, True),
        _node("0.2", root + _answer("9"), 1, -1.0, True),
    ]
    path = tmp_path / "paper_tree.json"
    path.write_text(json.dumps(paper))
    samples = extract_samples([path])
    got = {s.sources[0].split("#")[1]: s.value for s in samples}
    assert got == {"0": pytest.approx(-1 / 3), "0.1": 0.0, "0.1.1": 1.0, "0.2": -1.0}


def test_identical_paths_across_trees_are_pooled(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.jsonl"
    a.write_text(json.dumps(_fan_tree(1, 0)))  # root: 1 visit, +1
    b.write_text(json.dumps({"nodes": _fan_tree(0, 1)}) + "\n")  # same root: 1 visit, −1
    samples = extract_samples([a, b])
    roots = [s for s in samples if s.depth == 0]
    assert len(roots) == 1
    assert roots[0].visits == 2 and roots[0].value == pytest.approx(0.0)
    assert sorted(roots[0].sources) == ["a.json#0", "b.jsonl#0"]
    assert len(samples) == 3


def test_jsonl_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "tree.json"
    path.write_text(json.dumps(our_tree()))
    samples = extract_samples([path])
    out = tmp_path / "train.jsonl"
    assert write_samples(samples, out) == len(samples)
    assert read_samples(out) == samples
    first = json.loads(out.read_text().splitlines()[0])
    assert set(first) >= {"messages", "text", "value"}


def test_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"nodes": [{"tag": "0"}]}')
    with pytest.raises(ExtractError, match="bad.json.*lacks field"):
        extract_samples([bad])
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(ExtractError, match="broken.json: invalid JSON"):
        extract_samples([broken])


def test_tree_written_by_the_search_package_is_read(tmp_path: Path) -> None:
    """Integration with ``search.tree_io``: a real Tree saved in our format, with an infrastructure failure."""
    tree_io = pytest.importorskip("search.tree_io")
    from jupiter.task import Task
    from search.tree import NodeStatus, TerminalReason, Tree

    task = Task(id="t", question="What is the mean of a?", format="@mean[value]", label="@mean[2]")
    tree = Tree(task)
    tree.root.visit_count, tree.root.value_sum = 3, -1.0
    step = tree.add_child(tree.root, thought="look", code="print(2)", observation="2", status=NodeStatus.CODE_OK,
                          exec_status="ok", visit_count=2, value_sum=0.0)
    good = tree.add_child(step, thought="done", final_answer="@mean[2]", status=NodeStatus.ANSWER,
                          terminal=TerminalReason.ANSWER, visit_count=1, value_sum=1.0)
    lost = tree.add_child(step, thought="run", code="while True: pass", observation="timeout",
                          status=NodeStatus.INFRASTRUCTURE, exec_status="timeout",
                          terminal=TerminalReason.INFRASTRUCTURE, visit_count=1, value_sum=-1.0)
    bad = tree.add_child(tree.root, thought="guess", final_answer="@mean[7]", status=NodeStatus.ANSWER,
                         terminal=TerminalReason.ANSWER, visit_count=1, value_sum=-1.0)
    path = tree_io.save_tree(tree, tmp_path / "ours.json")
    samples = extract_samples([path])
    got = {s.sources[0].split("#")[1]: s.value for s in samples}
    assert got == {"0": pytest.approx(-1 / 3), step.tag: 0.0, good.tag: 1.0, bad.tag: -1.0}
    assert lost.tag not in got
    by_tag = {s.sources[0].split("#")[1]: s for s in samples}
    assert list(by_tag[good.tag].messages) == tree.messages(good)
