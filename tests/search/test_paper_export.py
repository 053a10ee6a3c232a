"""The paper-layout export (full ``messages`` per node): the value-model extractor gives the same training rows
from it as from our lean files and from the files we wrote before; the paper reader loads it back."""

from __future__ import annotations

import json
from pathlib import Path

from search_dabench import replay_rules

from jupiter.llm import ReplayPolicy
from search import Mode, SearchConfig, run_search
from search.export import PAPER_FIELDS, paper_records, save_paper_tree
from search.tree_cli import main
from search.tree_io import load_tree, save_tree
from value_model.extract import extract_samples

V1 = Path(__file__).parent / "data" / "tree_v1.json"


def _rows(path: Path) -> list[dict]:
    return [s.to_dict() for s in extract_samples([path])]


def _three_layouts(tree, tmp_path: Path, name: str) -> tuple[Path, Path]:
    """The same tree as our lean file and as the paper's layout, under the same file name (the extractor seeds
    its sampling with the name)."""
    lean = save_tree(tree, tmp_path / "lean" / name)
    paper = save_paper_tree(tree, tmp_path / "paper" / name)
    return lean, paper


def test_the_extractor_reads_every_layout_the_same(tmp_path):
    tree = load_tree(V1)
    lean, paper = _three_layouts(tree, tmp_path, V1.name)
    rows = _rows(V1)
    assert rows and any(r["is_terminal"] for r in rows)
    assert _rows(lean) == rows == _rows(paper)
    raw = json.loads(paper.read_text())
    assert all(set(PAPER_FIELDS) <= set(r) for r in raw)
    assert [r["messages"] for r in raw] == [r["messages"] for r in json.loads(V1.read_text())]


def test_a_real_tree_gives_the_same_training_rows_in_both_layouts(dabench_tasks, sandbox, tmp_path):
    """A collect tree from the real sandbox and the replay policy: correct and wrong answers, errors, depth 3."""
    policy = ReplayPolicy(rules=replay_rules(0), default=["Thought: lost."])
    config = SearchConfig(mode=Mode.COLLECT, iterations=12, expansions=3, cell_timeout=60)
    tree = run_search(dabench_tasks[0], policy, sandbox, config, seed=3).tree
    lean, paper = _three_layouts(tree, tmp_path, "0.json")
    rows = _rows(paper)
    assert {r["value"] > 0 for r in rows if r["is_terminal"]} == {True, False}
    assert _rows(lean) == rows
    system = json.dumps(tree.messages(tree.root)[0]["content"], ensure_ascii=False)[1:-1]
    assert lean.read_text().count(system) == 1 and paper.read_text().count(system) == len(tree.nodes)
    # the paper's reader loads the export back: same structure and messages
    again = load_tree(paper)
    assert sorted(n.tag for n in again.nodes) == sorted(n.tag for n in tree.nodes)
    assert all(again.messages(again[n.tag]) == tree.messages(n) for n in tree.nodes)


def test_the_command_line_writes_one_file_per_tree_in_either_layout(tmp_path, capsys):
    out = tmp_path / "paper"
    assert main(["paper", str(V1), "--out", str(out)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["written"], report["nodes"], report["out"]) == (1, 5, str(out))
    assert json.loads((out / V1.name).read_text()) == paper_records(load_tree(V1))
    assert main(["lean", str(V1), "--out", str(tmp_path / "lean")]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["bytes_before"] == V1.stat().st_size and report["after_over_before"] < 0.5
    assert main(["paper", str(out / V1.name), "--out", str(out)]) == 2  # never overwrites its input
    assert "overwrite the input" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("[]")
    assert main(["lean", str(tmp_path / "bad.json"), "--out", str(out)]) == 1
    assert "bad.json: no nodes" in capsys.readouterr().err
