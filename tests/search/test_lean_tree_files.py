"""Lean tree files: each node stores its own turn, outputs are capped per cell with the drop counted, images are
stored once, and the files written before (version 1, full messages per node) still load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from search.stored_outputs import IMAGE_REF_PREFIX, cap_outputs
from search.tree import NodeStatus, TerminalReason
from search.tree_io import TreeFileError, load_tree, node_messages, save_tree, tree_to_dict

DATA = Path(__file__).parent / "data"
#: written by the version-1 writer (``search/tree_io.py`` at e66d17c^) from a hand-built 5-node tree: a step
#: with 20,000 characters of output and a plot, a code-less reply with a child, an answer; the same plot twice
V1 = DATA / "tree_v1.json"


def test_a_version_1_file_still_loads_whole():
    raw = json.loads(V1.read_text())
    tree = load_tree(V1)
    assert [n.tag for n in tree.nodes] == [r["tag"] for r in raw]
    assert tree["0.1.1"].terminal is TerminalReason.ANSWER and tree["0.1.1"].final_answer == "@x[3]"
    assert tree["0.2"].status is NodeStatus.NO_CODE and tree["0.2.1"].parent is tree["0.2"]
    assert tree["0.1"].outputs == raw[1]["outputs"]  # read as written (the cap applies when writing)
    assert all(tree.messages(tree[r["tag"]]) == r["messages"] for r in raw)


def test_each_node_stores_only_its_own_turn(tmp_path):
    tree = load_tree(V1)
    path = save_tree(tree, tmp_path / "tree.json")
    text = path.read_text()
    raw = json.loads(text)
    assert raw[0]["version"] == 2 and "messages" not in raw[0]
    system = tree.messages(tree.root)[0]["content"]
    assert text.count(json.dumps(system, ensure_ascii=False)[1:-1]) == 1  # the system prompt once, not per node
    by_tag = {r["tag"]: r for r in raw}
    assert [m["role"] for m in by_tag["0"]["turn"]] == ["system", "user"]
    assert [m["role"] for m in by_tag["0.1"]["turn"]] == ["assistant", "user"] and by_tag["0.1"]["extends"] == "0"
    assert [m["role"] for m in by_tag["0.1.1"]["turn"]] == ["assistant"] and by_tag["0.1.1"]["extends"] == "0.1"
    # a reply with no clean turn is left out of its children's history: they extend the root
    assert by_tag["0.2.1"]["extends"] == "0"
    rebuilt = node_messages(raw)
    assert all(rebuilt[n.tag] == tree.messages(n) for n in tree.nodes)
    again = load_tree(path)
    assert tree_to_dict(again) == tree_to_dict(tree)
    assert len(text.encode()) < 0.5 * V1.stat().st_size


def test_outputs_are_capped_per_cell_and_the_drop_is_counted(tmp_path):
    tree = load_tree(V1)
    full = tree["0.1"].outputs[0]["text"]
    path = save_tree(tree, tmp_path / "tree.json", max_output_chars=1000)
    step = load_tree(path)["0.1"]
    stored = step.outputs[0]["text"]
    assert stored.startswith(full[:500]) and stored.endswith(full[-500:])
    assert f"{len(full) - 1000:,} characters not stored" in stored
    label = "<Figure size 640x480>"  # the image's text/plain, over the spent budget: dropped and counted too
    assert step.outputs_dropped_chars == len(full) - 1000 + len(label)
    assert step.outputs[1]["data"]["image/png"] == tree["0.1"].outputs[1]["data"]["image/png"]  # images never cut
    resaved = load_tree(save_tree(load_tree(path), tmp_path / "again.json", max_output_chars=1000))
    assert resaved["0.1"].outputs_dropped_chars == step.outputs_dropped_chars  # not counted twice


def test_an_image_shown_twice_is_stored_once(tmp_path):
    tree = load_tree(V1)
    png = tree["0.1"].outputs[1]["data"]["image/png"]
    path = save_tree(tree, tmp_path / "tree.json")
    text = path.read_text()
    assert text.count(png) == 1
    raw = json.loads(text)
    assert list(raw[0]["images"].values()) == [png]
    assert raw[1]["outputs"][1]["data"]["image/png"].startswith(IMAGE_REF_PREFIX)
    loaded = load_tree(path)
    assert loaded["0.1"].outputs[1]["data"]["image/png"] == png == loaded["0.2.1"].outputs[0]["data"]["image/png"]
    del raw[0]["images"]
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(raw))
    with pytest.raises(TreeFileError, match="not in the file's 'images' table"):
        load_tree(broken)


def test_html_and_tracebacks_over_the_budget():
    html = "<table>" + "<tr><td>1</td></tr>" * 100 + "</table>"
    outputs = [{"output_type": "execute_result", "execution_count": 1, "metadata": {},
                "data": {"text/plain": "x" * 50, "text/html": html}},
               {"output_type": "error", "ename": "ValueError", "evalue": "bad",
                "traceback": ["line one " * 10, "line two " * 10, "last line"]}]
    capped = cap_outputs(outputs, max_chars=100)
    assert capped.outputs[0]["data"] == {"text/plain": "x" * 50}  # the half table is dropped, not cut
    assert capped.outputs[1]["evalue"] == "bad" and len(capped.outputs[1]["traceback"]) == 1
    assert capped.dropped_chars == len(html) + (50 + 3 + 90 + 90 + 9) - 100
    assert cap_outputs(outputs, max_chars=10_000).outputs == tuple(outputs)
    with pytest.raises(ValueError, match="max_chars"):
        cap_outputs(outputs, max_chars=-1)


@pytest.mark.parametrize("change, message", [
    (lambda raw: raw[2].update(extends="0.9"), "extends '0.9', which is not in the file"),
    (lambda raw: raw[2].update(turn=None), "has no 'turn' list"),
    (lambda raw: raw[1].update(extends="0.1.1"), "cycle"),
])
def test_broken_turn_chains_name_the_node(tmp_path, change, message):
    raw = json.loads(save_tree(load_tree(V1), tmp_path / "tree.json").read_text())
    change(raw)
    with pytest.raises(TreeFileError, match=message):
        node_messages(raw, "t.json")
