"""``tree.html``: one self-contained page that shows a search tree, drawn by the project's one tree viewer.

The viewer is ``search/static/tree_view.js`` (plain JavaScript + SVG, no dependency): this module inlines it
into ``tree.html`` together with the tree's *view data* (``tree_view_data``), and ``jupiter serve`` serves the
same file to its page, which feeds it the same JSON (it reads it back out of the job's ``tree.html``). So the
static file and the live page draw a tree the same way: a tidy layout that fits the window, zoom and pan,
collapsible subtrees, answers as chips coloured by their answer group, a header with the question, the decided
answer and how it was decided, and the vote table.

All model text goes into the page as JSON (with ``<``, ``>`` and ``&`` escaped) and the viewer puts it on
screen with ``textContent`` only, so no reply can inject markup or script; the page fetches nothing and opens
from disk.
"""

from __future__ import annotations

import html
import json
import string
from pathlib import Path
from typing import Any

from jupiter.answers import reward
from search.config import Decision
from search.decide import Verdict, decide
from search.tree import MODEL_FAILURES, Node, Tree

__all__ = ["render_tree_html", "tree_view_data", "extract_view_data", "TREE_VIEW_JS", "VIEW_FORMAT",
           "DATA_ELEMENT_ID"]

#: The viewer, stored once: inlined here, served by ``jupiter serve`` as ``/static/tree_view.js``.
TREE_VIEW_JS = Path(__file__).resolve().parent / "static" / "tree_view.js"
VIEW_FORMAT = "jupiter-tree-view"
VIEW_VERSION = 1
#: The id of the ``<script type="application/json">`` element that carries the view data in tree.html.
DATA_ELEMENT_ID = "tree-data"


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


def _node_data(node: Node, key: str | None) -> dict[str, Any]:
    return {
        "tag": node.tag,
        "parent": node.parent.tag if node.parent else None,
        "depth": node.depth,
        "kind": _kind(node),
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
        "key": key,
        "reply": node.reply if node.code is None and node.final_answer is None else "",
    }


def _decided_by(verdict: Verdict, chosen_tag: str) -> Decision | None:
    """Which rule picked ``chosen_tag``: the vote's winner is reported as a vote (the default decision)."""
    if verdict.vote is not None and verdict.vote.tag == chosen_tag:
        return Decision.VOTE
    if verdict.by_value is not None and verdict.by_value.tag == chosen_tag:
        return Decision.VALUE
    return None


def tree_view_data(tree: Tree, chosen_tag: str | None = None, summary: str = "",
                   decided_by: Decision | None = None) -> dict[str, Any]:
    """The JSON the viewer draws: the question, the decision, the vote table and every node.

    The vote table is ``search.decide.decide`` over the tree's answers — the same call ``result_from_tree``
    makes, so its rows (``key``, ``answer``, ``count``, in order) are ``result.json``'s ``vote_table``; each row
    also lists its answer nodes (``tags``) and whether it matches the task's label (``matches_label``, None
    without a label). ``chosen_tag`` is the decided answer's node (None while a tree still grows: the page then
    shows the leading answer); ``decided_by`` (VOTE or VALUE; written as its value) is inferred from it when not
    given.
    """
    verdict = decide(tree.answers())
    keys = {c.tag: c.key for c in verdict.candidates}
    tags: dict[str, list[str]] = {}
    for candidate in verdict.candidates:
        tags.setdefault(candidate.key, []).append(candidate.tag)
    task = tree.task
    label = task.label if task is not None else None
    vote = [{
        "key": entry.key,
        "answer": entry.answer,
        "count": entry.count,
        "mean_value": round(entry.mean_value, 4),
        "first_tag": entry.first_tag,
        "matches_label": None if label is None else reward(entry.answer, label) == 1.0,
        "tags": tags.get(entry.key, []),
    } for entry in verdict.vote_table]
    chosen = tree[chosen_tag] if chosen_tag is not None and chosen_tag in tree else None
    answer = chosen.final_answer if chosen is not None else None
    decision = decided_by or (_decided_by(verdict, chosen.tag) if chosen is not None else None)
    nodes = [_node_data(n, keys.get(n.tag)) for n in tree.nodes]
    if task is not None and task.setup.strip():  # the root's own cell: the task's setup, run once
        nodes[0].update(thought="Setup cell, run once before the search", code=task.setup,
                        observation=task.setup_output or "")
    return {
        "format": VIEW_FORMAT,
        "version": VIEW_VERSION,
        "task_id": task.id if task is not None else None,
        "question": task.question if task is not None else None,
        "label": label,
        "summary": summary,
        "final": chosen is not None,
        "answer": answer,
        "decided_by": decision.value if decision is not None else None,
        "chosen_tag": chosen.tag if chosen is not None else None,
        "correct": None if label is None or answer is None else reward(answer, label) == 1.0,
        "vote": vote,
        "nodes": nodes,
    }


def _script_json(data: Any) -> str:
    """JSON safe inside a <script> element."""
    return (json.dumps(data, ensure_ascii=False)
            .replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def _viewer_source() -> str:
    """The viewer's source, checked to be safe to inline in a <script> element."""
    try:
        source = TREE_VIEW_JS.read_text(encoding="utf-8")
    except OSError as exc:
        raise FileNotFoundError(f"tree viewer {TREE_VIEW_JS}: cannot read it ({exc}); is the package installed "
                                "with its data files?") from exc
    lowered = source.lower()
    if "</script" in lowered or "<!--" in lowered:
        raise ValueError(f"tree viewer {TREE_VIEW_JS}: contains '</script' or '<!--', which would end the "
                         "inline <script> of tree.html early")
    return source


_PAGE = string.Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title>
<style>
*{box-sizing:border-box}
body{font-family:system-ui,sans-serif;margin:0;display:flex;height:100vh;color:#222;font-size:14px}
#tree-wrap{flex:1;min-width:0;border-right:1px solid #ddd}
#side{width:min(460px,40vw);overflow:auto;padding:4px 14px 14px;background:#fafafa}
#detail .label{font-weight:600;margin-top:10px}
pre{background:#f1f2f4;padding:8px;white-space:pre-wrap;word-break:break-word;font-size:12px;margin:4px 0}
.muted{color:#6b7280}
</style></head><body>
<div id="tree-wrap"><svg id="tree" xmlns="http://www.w3.org/2000/svg"></svg></div>
<div id="side"><div id="header"></div><div id="detail"></div></div>
<script id="$data_id" type="application/json">$data</script>
<script>
$viewer
</script>
<script>
"use strict";
JupiterTreeView.create({tree: document.getElementById("tree-wrap"), detail: document.getElementById("detail"),
                        header: document.getElementById("header"), svgId: "tree"})
  .render(JSON.parse(document.getElementById("$data_id").textContent));
</script></body></html>
""")


def render_tree_html(tree: Tree, title: str = "", chosen_tag: str | None = None, summary: str = "",
                     decided_by: Decision | None = None) -> str:
    """The self-contained page for ``tree``; ``chosen_tag`` is the decided answer's node (its path is marked).

    ``title`` (the task id, by convention) names the browser tab when the task has no question.
    """
    data = tree_view_data(tree, chosen_tag, summary, decided_by)
    heading = data["question"] or title or data["task_id"] or "tree"
    heading = " ".join(str(heading).split())
    if len(heading) > 90:
        heading = heading[:89] + "…"
    # one pass: text substituted in (model text in the data, the viewer's source) is never scanned again
    return _PAGE.substitute(title=html.escape("Jupiter search tree: " + heading), data_id=DATA_ELEMENT_ID,
                            viewer=_viewer_source(), data=_script_json(data))


def extract_view_data(page: str) -> dict[str, Any]:
    """The view data embedded in a ``tree.html`` (what the service page reads back out of it)."""
    start_tag = f'<script id="{DATA_ELEMENT_ID}" type="application/json">'
    start = page.find(start_tag)
    if start < 0:
        raise ValueError(f"tree.html: no <script id={DATA_ELEMENT_ID!r}> element (not a Jupiter tree page?)")
    start += len(start_tag)
    end = page.find("</script>", start)
    if end < 0:
        raise ValueError(f"tree.html: the {DATA_ELEMENT_ID!r} element is not closed")
    data: dict[str, Any] = json.loads(page[start:end])
    return data
