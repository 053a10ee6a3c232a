"""Tree files: our JSON round trip, and reading the paper's tree files (structure rebuilt from tags)."""

from __future__ import annotations

import json

import pytest
from search_fakes import FakePolicy, FakeSandbox, answer, code
from test_search_driver import TASK, script

from search import Mode, SearchConfig, run_search
from search.tree import NodeStatus, TerminalReason
from search.tree_io import TreeFileError, load_tree, node_messages, save_tree, tree_from_dict, tree_to_dict

PAPER_FIELDS = {"tag", "depth", "is_terminal", "visit_count", "value_sum", "value"}  # and ``messages`` rebuilt


def test_our_tree_file_round_trips_and_keeps_the_papers_fields(tmp_path):
    result = run_search(TASK, FakePolicy(script()), FakeSandbox(), SearchConfig(mode=Mode.COLLECT, iterations=4))
    path = save_tree(result.tree, tmp_path / "tree.json")
    raw = json.loads(path.read_text())
    assert isinstance(raw, list) and raw[0]["tag"] == "0" and raw[0]["format"] == "jupiter-tree"
    assert all(PAPER_FIELDS <= set(node) for node in raw)
    messages = node_messages(raw)
    answer_node = next(n for n in raw if n["status"] == "answer")
    assert messages[answer_node["tag"]][-1]["content"].endswith(answer_node["final_answer"])
    assert messages[answer_node["tag"]][0]["role"] == "system"
    assert all(messages[n.tag] == result.tree.messages(n) for n in result.tree.nodes)
    loaded = load_tree(path)
    assert tree_to_dict(loaded) == tree_to_dict(result.tree)
    assert tree_to_dict(tree_from_dict(tree_to_dict(result.tree))) == tree_to_dict(result.tree)
    assert loaded.task == result.tree.task
    assert [c.tag for c in loaded.root.children] == [c.tag for c in result.tree.root.children]


def _paper_nodes():
    system = {"role": "system", "content": "sys"}
    user = {"role": "user", "content": "Task: q"}
    step = {"role": "assistant", "content": code("look", "print(3)")}
    obs = {"role": "user", "content": "Observation:\n3"}
    final = {"role": "assistant", "content": answer("@x[3]")}
    return [
        {"tag": "0", "depth": 0, "messages": [system, user], "is_terminal": False, "visit_count": 3,
         "value_sum": 1.0, "value": 0.33},
        {"tag": "0.1.1", "depth": 2, "messages": [system, user, step, obs, final], "is_terminal": True,
         "visit_count": 1, "value_sum": 1.0, "value": 1.0},
        {"tag": "0.1", "depth": 1, "messages": [system, user, step, obs], "is_terminal": False, "visit_count": 2,
         "value_sum": 2.0, "value": 1.0},
        {"tag": "0.2", "depth": 1, "messages": [system, user, {"role": "assistant", "content": "hmm"}],
         "is_terminal": True, "visit_count": 1, "value_sum": -1.0, "value": -1.0},
    ]


@pytest.mark.parametrize("layout", ["list", "nodes", "by_tag"])
def test_the_papers_tree_files_load(tmp_path, layout):
    nodes = _paper_nodes()
    data = {"list": nodes, "nodes": {"nodes": nodes}, "by_tag": {n["tag"]: n for n in nodes}}[layout]
    path = tmp_path / "paper.json"
    path.write_text(json.dumps(data))
    tree = load_tree(path)
    assert [c.tag for c in tree.root.children] == ["0.1", "0.2"]
    step, final, chat = tree["0.1"], tree["0.1.1"], tree["0.2"]
    assert final.parent is step and step.parent is tree.root
    assert (step.code, step.observation, step.status) == ("print(3)", "3", NodeStatus.CODE_OK)
    assert final.final_answer == "@x[3]" and final.terminal is TerminalReason.ANSWER
    assert chat.terminal is TerminalReason.NO_CODE
    assert step.visit_count == 2 and step.value == 1.0
    assert tree.messages(final) == nodes[1]["messages"]
    assert [a.tag for a in tree.answers()] == ["0.1.1"]
    again = tmp_path / "again.json"
    save_tree(tree, again)  # a paper tree can be written in our layout, and keeps its messages without a task
    reread = load_tree(again)
    assert reread["0.1.1"].final_answer == "@x[3]"
    assert all(reread.messages(reread[n["tag"]]) == n["messages"] for n in nodes)


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON"),
    ("[]", "no nodes"),
    ('[{"depth": 0, "messages": []}]', "no 'tag'"),
    ('[{"tag": "0.1", "messages": []}]', "no root"),
    ('[{"tag": "0", "messages": []}, {"tag": "0.4.1", "messages": []}]', "no parent '0.4'"),
    ('[{"tag": "a.b", "messages": []}]', "dotted integers"),
    ('"x"', "expected a list"),
])
def test_bad_tree_files_name_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(TreeFileError, match=message):
        load_tree(path)
    with pytest.raises(TreeFileError, match="not found"):
        load_tree(tmp_path / "missing.json")


LAYOUT_CHECK = """
const data = JSON.parse(DATA);
const kids = new Map();
for (const n of data.nodes) {
  if (n.parent === null) continue;
  if (!kids.has(n.parent)) kids.set(n.parent, []);
  kids.get(n.parent).push(n.tag);
}
const pos = window.JupiterTreeView.tidyLayout(data.nodes[0].tag, t => kids.get(t) || [], () => ({half: 6, width: 10}));
let apart = true;
for (const [a, p] of pos) for (const [b, q] of pos) {
  if (a < b && p.depth === q.depth && Math.abs(p.y - q.y) < 12) apart = false;
}
console.log(pos.size + ' ' + apart + ' ' + (data.nodes[1].thought === THOUGHT));
"""


def test_tree_page_script_runs_and_keeps_model_text_inert(tmp_path):
    """In node: the page's JSON gives back the exact model text (markup stays data) and its inline viewer runs
    and lays the tree out with no two nodes of a depth overlapping. The drawing in a real browser is
    tests/search/test_tree_view_browser.py."""
    import re
    import shutil
    import subprocess

    from search.html import render_tree_html

    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    result = run_search(TASK, FakePolicy(script()), FakeSandbox(), SearchConfig(mode=Mode.COLLECT, iterations=4))
    thought = "</script><img src=x onerror=alert(1)>"
    result.tree.nodes[1].thought = thought
    page = render_tree_html(result.tree, "t", result.chosen_tag, "summary")
    assert "<img src=x" not in page
    data = re.search(r'<script id="tree-data" type="application/json">(.*?)</script>', page, re.S).group(1)
    viewer = re.findall(r"<script>(.*?)</script>", page, re.S)[0]
    program = (f"const window = globalThis;\nconst DATA = {json.dumps(data)};\nconst THOUGHT = {json.dumps(thought)};\n"
               f"{viewer}\n{LAYOUT_CHECK}")
    (tmp_path / "page.js").write_text(program)
    out = subprocess.run(["node", str(tmp_path / "page.js")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(result.tree.nodes)), "true", "true"]
