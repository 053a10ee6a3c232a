"""The data tree.html feeds the tree viewer: the vote table is result.json's vote, the question heads the page,
the decision says how it was made, model text stays inert, and the one viewer file is what gets inlined."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from viewer_trees import LABEL, QUESTION, decided, wide_tree

import search.html as tree_html
from jupiter.answers import canonical_answer, reward
from jupiter.cli import main
from search.config import Decision
from search.html import TREE_VIEW_JS, extract_view_data, render_tree_html, tree_view_data
from search.outputs import write_outputs
from search.tree import NodeStatus, TerminalReason, Tree

EXAMPLES = Path(__file__).resolve().parents[2] / "jupiter" / "examples"
HOSTILE = "</script><script>window.__pwned = 1</script><img src=x onerror=\"window.__pwned = 2\"><b>bold</b>"


def _rows(vote: list[dict]) -> list[tuple]:
    return [(r["key"], r["answer"], r["count"], r["first_tag"]) for r in vote]


def test_vote_table_of_a_150_node_tree_is_result_jsons_vote(tmp_path: Path) -> None:
    result = decided(wide_tree(150))
    write_outputs(result, tmp_path)
    record = json.loads((tmp_path / "result.json").read_text())
    data = extract_view_data((tmp_path / "tree.html").read_text())
    assert len(data["nodes"]) == record["nodes"] == 150
    assert _rows(data["vote"]) == _rows(record["vote_table"])
    # each row lists exactly its answer nodes, and says whether it is the label's answer
    by_key: dict[str, list[str]] = {}
    for candidate in record["candidates"]:
        by_key.setdefault(candidate["key"], []).append(candidate["tag"])
    assert {r["key"]: r["tags"] for r in data["vote"]} == by_key
    assert [r["matches_label"] for r in data["vote"]] == [reward(r["answer"], LABEL) == 1.0 for r in data["vote"]]
    # two spellings of the label's answer are one group, and it won
    top = data["vote"][0]
    assert top["key"] == canonical_answer(LABEL) and top["matches_label"] is True
    assert {n["answer"] for n in data["nodes"] if n["tag"] in top["tags"]} == {LABEL, "@mean_fare[ 34.650 ]"}
    assert data["answer"] == record["answer"] and data["chosen_tag"] == record["chosen_tag"]
    assert data["decided_by"] == record["decided_by"] == "vote" and data["correct"] is record["correct"] is True
    assert data["question"] == QUESTION and data["label"] == LABEL and data["final"] is True


def test_a_real_solve_writes_a_page_whose_vote_and_decision_are_result_jsons(tmp_path: Path) -> None:
    """The engine on the real sandbox with the scripted policy, through ``jupiter solve``."""
    out = tmp_path / "run"
    code = main(["solve", str(EXAMPLES / "titanic_mean_fare.json"), "--llm",
                 f"replay:{EXAMPLES / 'titanic_mean_fare.replay.json'}", "--iterations", "10", "--expansions", "3",
                 "--out", str(out), "--no-progress"])
    assert code == 0
    record = json.loads((out / "result.json").read_text())
    page = (out / "tree.html").read_text()
    data = extract_view_data(page)
    assert _rows(data["vote"]) == _rows(record["vote_table"]) and record["vote_table"]
    for field in ("answer", "decided_by", "chosen_tag", "label", "correct"):
        assert data[field] == record[field], field
    task = json.loads((EXAMPLES / "titanic_mean_fare.json").read_text())
    assert data["question"] == task["question"] and data["task_id"] == record["task_id"]
    assert data["question"] in page.split("</title>")[0]  # the tab is named by the question, not the id
    assert len(data["nodes"]) == record["nodes"]


def test_a_growing_tree_has_no_decision_yet_but_its_vote_so_far() -> None:
    tree = wide_tree(40, seed=3)
    data = tree_view_data(tree, None, "running: 12 iterations")
    assert data["final"] is False and data["answer"] is None and data["decided_by"] is None
    assert data["chosen_tag"] is None and data["summary"] == "running: 12 iterations"
    assert sum(r["count"] for r in data["vote"]) == len(tree.answers())


def test_a_value_decision_is_reported_as_one() -> None:
    tree = Tree(None)
    a = tree.add_child(tree.root, status=NodeStatus.ANSWER, terminal=TerminalReason.ANSWER, final_answer="@x[1]")
    tree.add_child(tree.root, status=NodeStatus.ANSWER, terminal=TerminalReason.ANSWER, final_answer="@x[1]")
    b = tree.add_child(tree.root, status=NodeStatus.ANSWER, terminal=TerminalReason.ANSWER, final_answer="@x[2]")
    b.visit_count, b.value_sum = 1, 0.9
    assert tree_view_data(tree, a.tag)["decided_by"] == "vote"
    data = tree_view_data(tree, b.tag)
    assert data["decided_by"] == "value" and data["answer"] == "@x[2]"
    assert [r["count"] for r in data["vote"]] == [2, 1] and data["vote"][0]["matches_label"] is None
    # a caller that knows says so
    assert tree_view_data(tree, b.tag, decided_by=Decision.VOTE)["decided_by"] == "vote"


def test_model_text_goes_in_as_inert_json_and_comes_back_exact() -> None:
    tree = wide_tree(30, seed=1, thought=HOSTILE, question="Mean fare? " + HOSTILE)
    page = render_tree_html(tree, "titanic-wide")
    assert "<script>window.__pwned" not in page and "<b>bold" not in page and "<img" not in page
    data = extract_view_data(page)
    assert data["question"] == "Mean fare? " + HOSTILE
    assert any(n["thought"] == HOSTILE for n in data["nodes"])
    # the title is escaped HTML, and placeholders in model text are not substituted again
    assert "&lt;/script&gt;" in page.split("</title>")[0]
    tree.nodes[1].thought = "$viewer $data __VIEWER__"
    assert extract_view_data(render_tree_html(tree))["nodes"][1]["thought"] == "$viewer $data __VIEWER__"


def test_the_page_inlines_the_one_viewer_file_and_fetches_nothing() -> None:
    page = render_tree_html(wide_tree(20))
    source = TREE_VIEW_JS.read_text(encoding="utf-8")
    assert page.count(source) == 1
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "") and "https://" not in page
    assert " src=" not in page and "<link" not in page and "import(" not in source


def test_a_viewer_that_would_end_the_inline_script_is_refused(tmp_path: Path, monkeypatch) -> None:
    bad = tmp_path / "tree_view.js"
    bad.write_text("const s = '</script>';\n")
    monkeypatch.setattr(tree_html, "TREE_VIEW_JS", bad)
    with pytest.raises(ValueError, match="tree_view.js: contains '</script'"):
        render_tree_html(wide_tree(10))
    monkeypatch.setattr(tree_html, "TREE_VIEW_JS", tmp_path / "absent.js")
    with pytest.raises(FileNotFoundError, match="absent.js"):
        render_tree_html(wide_tree(10))


def test_extracting_from_a_page_that_is_not_a_tree_page_names_the_problem() -> None:
    with pytest.raises(ValueError, match="tree.html: no <script id='tree-data'>"):
        extract_view_data("<html><body>hello</body></html>")
