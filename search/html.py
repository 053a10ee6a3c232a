"""``tree.html``: one self-contained page that draws a search tree (inline SVG built by inline JS, no CDN).

Nodes are coloured by value (red −1 … green +1) and outlined by status (answers thick, model failures grey,
infrastructure failures dashed orange, the chosen answer's path highlighted). A click shows the node's
thought, cell, output and numbers. All model text goes into the page as JSON (with ``<``, ``>`` and ``&``
escaped) and is put on screen with ``textContent`` only, so no reply can inject markup or script.
"""

from __future__ import annotations

import html
import json
from typing import Any

from search.tree import MODEL_FAILURES, Node, Tree

__all__ = ["render_tree_html"]


def _layout(tree: Tree) -> dict[str, tuple[float, int]]:
    """x (in leaf slots) and depth of every node: leaves left to right, parents centred over children."""
    positions: dict[str, tuple[float, int]] = {}
    next_slot = [0.0]

    def place(node: Node) -> float:
        if not node.children:
            x = next_slot[0]
            next_slot[0] += 1
        else:
            xs = [place(c) for c in node.children]
            x = (xs[0] + xs[-1]) / 2
        positions[node.tag] = (x, node.depth)
        return x

    place(tree.root)
    return positions


def _kind(node: Node) -> str:
    if node.parent is None:
        return "root"
    if node.is_answer:
        return "answer"
    if node.is_infrastructure_failure:
        return "infrastructure"
    if node.terminal in MODEL_FAILURES:
        return "failure"
    return "step"


def _node_data(node: Node, x: float, depth: int, chosen: set[str]) -> dict[str, Any]:
    return {
        "tag": node.tag,
        "parent": node.parent.tag if node.parent else None,
        "x": x,
        "depth": depth,
        "kind": _kind(node),
        "chosen": node.tag in chosen,
        "status": node.status.value,
        "terminal": node.terminal.value if node.terminal else None,
        "value": round(node.value, 4),
        "visits": node.visit_count,
        "prior": round(node.prior, 4),
        "multiplicity": node.multiplicity,
        "evaluation": node.evaluation,
        "thought": node.thought,
        "code": node.code,
        "observation": node.observation,
        "answer": node.final_answer,
        "reply": node.reply if node.code is None and node.final_answer is None else "",
    }


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element."""
    return (json.dumps(data, ensure_ascii=False)
            .replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Jupiter search tree: __TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;margin:0;display:flex;height:100vh}
#left{flex:3;overflow:auto;border-right:1px solid #ccc}#right{flex:2;overflow:auto;padding:12px}
h1{font-size:16px;margin:8px 12px}p.meta{margin:4px 12px;font-size:13px;color:#444}
pre{background:#f6f6f6;padding:8px;white-space:pre-wrap;word-break:break-word;font-size:12px}
.label{font-weight:600;margin-top:10px}circle{cursor:pointer}text{font-size:9px;pointer-events:none}
.legend span{display:inline-block;margin-right:10px;font-size:12px}
</style></head><body>
<div id="left"><h1>__TITLE__</h1><p class="meta" id="meta"></p>
<p class="meta legend"><span>fill: value (red −1 … green +1)</span><span>thick: answer</span>
<span>grey: model failure</span><span>dashed orange: infrastructure</span><span>blue ring: chosen path</span></p>
<svg id="tree" xmlns="http://www.w3.org/2000/svg"></svg></div>
<div id="right"><p>Click a node to see its step.</p><div id="detail"></div></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("data").textContent);
const NS = "http://www.w3.org/2000/svg", DX = 34, DY = 70, R = 11, PAD = 30;
const nodes = data.nodes, byTag = {};
nodes.forEach(n => byTag[n.tag] = n);
const svg = document.getElementById("tree");
const width = PAD * 2 + DX * (Math.max(...nodes.map(n => n.x)) + 1);
const height = PAD * 2 + DY * (Math.max(...nodes.map(n => n.depth)) + 1);
svg.setAttribute("width", width); svg.setAttribute("height", height);
document.getElementById("meta").textContent = data.summary;
function pos(n) { return [PAD + DX * n.x + R, PAD + DY * n.depth + R]; }
function colour(v) {
  const t = Math.max(-1, Math.min(1, v));
  const r = t < 0 ? 220 : Math.round(220 - 170 * t), g = t > 0 ? 190 : Math.round(190 + 100 * t);
  return "rgb(" + r + "," + g + ",80)";
}
function el(name, attrs) {
  const e = document.createElementNS(NS, name);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  svg.appendChild(e); return e;
}
nodes.forEach(n => { if (n.parent !== null) {
  const [x1, y1] = pos(byTag[n.parent]), [x2, y2] = pos(n);
  el("line", {x1: x1, y1: y1, x2: x2, y2: y2, stroke: n.chosen ? "#2463eb" : "#999",
              "stroke-width": n.chosen ? 3 : 1});
}});
nodes.forEach(n => {
  const [x, y] = pos(n);
  const fill = n.kind === "failure" ? "#bbb" : n.kind === "infrastructure" ? "#fff" : colour(n.value);
  const c = el("circle", {cx: x, cy: y, r: R, fill: fill,
    stroke: n.chosen ? "#2463eb" : n.kind === "infrastructure" ? "#e08a00" : "#333",
    "stroke-width": n.kind === "answer" || n.chosen ? 3 : 1,
    "stroke-dasharray": n.kind === "infrastructure" ? "3,2" : "none"});
  const title = document.createElementNS(NS, "title");
  title.textContent = n.tag + " " + n.status + " value " + n.value;
  c.appendChild(title);
  c.addEventListener("click", () => show(n));
  const t = el("text", {x: x, y: y + R + 10, "text-anchor": "middle"});
  t.textContent = n.kind === "answer" ? (n.answer || "").slice(0, 18) : n.tag.split(".").pop();
});
function section(parent, label, text) {
  if (text === null || text === undefined || text === "") return;
  const h = document.createElement("div"); h.className = "label"; h.textContent = label; parent.appendChild(h);
  const p = document.createElement("pre"); p.textContent = String(text); parent.appendChild(p);
}
function show(n) {
  const d = document.getElementById("detail"); d.replaceChildren();
  section(d, "Node", n.tag + "  status: " + n.status + (n.terminal ? "  terminal: " + n.terminal : "") +
    "\\nvalue " + n.value + "  visits " + n.visits + "  prior " + n.prior + "  sampled " + n.multiplicity + "x  evaluation " + n.evaluation);
  section(d, "Thought", n.thought); section(d, "Cell", n.code); section(d, "Output", n.observation);
  section(d, "Answer", n.answer); section(d, "Reply", n.reply);
}
</script></body></html>
"""


def render_tree_html(tree: Tree, title: str = "", chosen_tag: str | None = None, summary: str = "") -> str:
    """The page for ``tree``; ``chosen_tag`` highlights the path to that node."""
    positions = _layout(tree)
    chosen = set()
    if chosen_tag is not None and chosen_tag in tree:
        chosen = {n.tag for n in tree[chosen_tag].path()}
    data = {
        "summary": summary,
        "nodes": [_node_data(n, *positions[n.tag], chosen) for n in tree.nodes],
    }
    task = tree.task
    if task is not None and task.setup.strip():  # the root's own cell: the task's setup, run once
        root = data["nodes"][0]
        root.update(thought="Setup cell, run once before the search", code=task.setup,
                    observation=task.setup_output or "")
    return _PAGE.replace("__TITLE__", html.escape(title or (tree.task.id if tree.task else "tree"))).replace(
        "__DATA__", _script_json(data))
