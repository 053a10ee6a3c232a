"""Tree files: our lean JSON, the files we wrote before (version 1) and the paper's tree files.

Our layout (version 2) is a JSON list of nodes, root first, one node per line::

    [{"tag": "0", "depth": 0, "is_terminal": false, "visit_count": 9, "value_sum": 2.0, "value": 0.22,
      "turn": [{"role": "system", ...}, {"role": "user", ...}],
      "format": "jupiter-tree", "version": 2, "task": {...Task.to_dict()}, "images": {...},   # root only
      "parent": null, "thought": "", "code": null, "observation": null, "status": "root", ...},
     {"tag": "0.1", "extends": "0", "turn": [{"role": "assistant", ...}, {"role": "user", ...}], ...}, ...]

Each node stores only its own turn: the messages it adds to the history of the node named by ``extends``
(its parent, or further up when the parent's reply had no clean turn, see ``Tree.history_base``), so a node's
full ``messages`` are ``messages(extends) + turn`` — the root's are its ``turn``. Why: version 1 stored every
node's whole path (the system prompt alone was 21 % of the bytes; real replies grow it with depth squared).
Outputs are stored capped per cell, images once per file (``search.stored_outputs``); ``outputs_dropped_chars``
counts what was left out. ``search.export.paper_records`` writes the paper's layout (full ``messages`` per
node) for its scripts.

Version 1 files (full ``messages`` per node, ``indent=1``) and the paper's own files still load: the paper's
are a JSON list of nodes, or a dict holding them (``{"nodes": [...]}`` or ``{tag: node}``); their structure is
rebuilt from the tags ("0" → "0.1" → "0.1.2") and each node's step is recovered from the last turns of its
``messages``. Sandbox states and executions are never written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jupiter.appendlog import replace_atomically
from jupiter.prompts import OBSERVATION_PREFIX, Message, ReplyStatus, parse_reply
from jupiter.task import Task, task_from_record
from jupiter.tree_records import chain_messages
from search.stored_outputs import (
    DEFAULT_MAX_CHARS,
    CappedOutputs,
    cap_outputs,
    duplicate_images,
    resolve_images,
    share_images,
)
from search.tree import Node, NodeStatus, TerminalReason, Tree

__all__ = ["TreeFileError", "tree_to_records", "tree_to_dict", "tree_from_dict", "save_tree", "load_tree",
           "node_messages", "dumps_records", "FORMAT", "VERSION"]

FORMAT = "jupiter-tree"
VERSION = 2


class TreeFileError(ValueError):
    """A tree file is unusable; the message names the file and the problem."""


def _own_turn(tree: Tree, node: Node, cache: dict[str, list[Message]]) -> tuple[Node | None, list[Message]]:
    """(the history base, the messages ``node`` adds to the base's); ``cache`` holds messages by tag."""
    mine = cache.get(node.tag)
    if mine is None:
        mine = cache[node.tag] = tree.messages(node)
    base = tree.history_base(node)
    if base is None:
        return None, mine
    theirs = cache.get(base.tag)
    if theirs is None:
        theirs = cache[base.tag] = tree.messages(base)
    return base, mine[len(theirs):]


def _node_to_dict(tree: Tree, node: Node, cache: dict[str, list[Message]], capped: CappedOutputs,
                  images: dict[str, str]) -> dict[str, Any]:
    base, turn = _own_turn(tree, node, cache)
    ran = node.execution.dropped_chars if node.execution is not None else 0
    dropped = node.outputs_dropped_chars + ran + capped.dropped_chars
    record: dict[str, Any] = {
        # the paper's fields (without ``messages``: see ``turn``)
        "tag": node.tag,
        "depth": node.depth,
        "is_terminal": node.is_terminal,
        "visit_count": node.visit_count,
        "value_sum": node.value_sum,
        "value": node.value,
        # ours
        "parent": node.parent.tag if node.parent else None,
        "extends": base.tag if base is not None else None,
        "turn": turn,
        "thought": node.thought,
        "code": node.code,
        "observation": node.observation,
        "reply": node.reply,
        "finish_reason": node.finish_reason,
        "status": node.status.value,
        "exec_status": node.exec_status,
        "terminal_reason": node.terminal.value if node.terminal else None,
        "final_answer": node.final_answer,
        "prior": node.prior,
        "multiplicity": node.multiplicity,
        "evaluation": node.evaluation,
        "consecutive_errors": node.consecutive_errors,
        "expanded": node.expanded,
        "exhausted": node.exhausted,
        "infrastructure_failure": node.is_infrastructure_failure,
        "timings": dict(node.timings),
        "outputs": share_images(capped.outputs, images),
    }
    if dropped:
        record["outputs_dropped_chars"] = dropped
    return record


def _records(tree: Tree, max_output_chars: int) -> tuple[list[dict[str, Any]], dict[str, str]]:
    capped = [cap_outputs(n.outputs, max_output_chars) for n in tree.nodes]
    images = duplicate_images(c.outputs for c in capped)
    cache: dict[str, list[Message]] = {}
    return [_node_to_dict(tree, n, cache, c, images) for n, c in zip(tree.nodes, capped)], images


def tree_to_records(tree: Tree, max_output_chars: int = DEFAULT_MAX_CHARS) -> list[dict[str, Any]]:
    """The file layout: a list of node records in creation order; the root's also names the format and task
    (and holds the ``images`` table when an image occurs more than once)."""
    records, images = _records(tree, max_output_chars)
    records[0].update(format=FORMAT, version=VERSION, task=tree.task.to_dict() if tree.task is not None else None)
    if images:
        records[0]["images"] = images
    return records


def tree_to_dict(tree: Tree, max_output_chars: int = DEFAULT_MAX_CHARS) -> dict[str, Any]:
    """``{"format", "version", "task", "nodes"}`` (and ``images`` when shared): the file's content as a dict
    (for embedding in other JSON)."""
    records, images = _records(tree, max_output_chars)
    data: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "task": tree.task.to_dict() if tree.task is not None else None,
        "nodes": records,
    }
    if images:
        data["images"] = images
    return data


def dumps_records(records: list[dict[str, Any]]) -> str:
    """A JSON list with one compact node per line: small, and still greppable and diffable by node."""
    lines = (json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records)
    return "[\n" + ",\n".join(lines) + "\n]\n"


def save_tree(tree: Tree, path: str | Path, max_output_chars: int = DEFAULT_MAX_CHARS, durable: bool = False) -> Path:
    """Write ``tree`` as JSON (UTF-8, atomically via a temporary file). Returns the path.

    ``max_output_chars``: text kept per cell's outputs (``search.stored_outputs``). ``durable``: on disk before
    this returns (``replace_atomically``), for a file a later record vouches for (the Ray driver's manifest).
    """
    text = dumps_records(tree_to_records(tree, max_output_chars))
    return replace_atomically(path, lambda tmp: tmp.write_text(text, encoding="utf-8"), durable)


def node_messages(records: list[dict[str, Any]], where: str = "tree") -> dict[str, list[Message]]:
    """``{tag: messages}`` of every node of a version-2 record list (``messages(extends) + turn``).

    Raises TreeFileError naming the node when its ``turn`` is not a list or its ``extends`` is not in the file.
    """
    return chain_messages(records, where, TreeFileError)


def _tag_key(tag: str) -> tuple[int, ...]:
    return tuple(int(part) for part in tag.split("."))


def _check_tag(tag: Any, where: str) -> str:
    text = str(tag)
    try:
        _tag_key(text)
    except ValueError:
        raise TreeFileError(f"{where}: node tag {text!r} is not dotted integers like '0.1.2'") from None
    return text


def _from_ours(record: dict[str, Any], images: dict[str, str], where: str) -> Node:
    terminal = record.get("terminal_reason")
    try:
        outputs = resolve_images(record.get("outputs") or [], images, f"{where}: node {record.get('tag')!r}")
    except ValueError as exc:
        raise TreeFileError(str(exc)) from None
    return Node(
        tag=str(record["tag"]),
        depth=int(record["depth"]),
        thought=record.get("thought") or "",
        code=record.get("code"),
        observation=record.get("observation"),
        reply=record.get("reply") or "",
        finish_reason=record.get("finish_reason"),
        status=NodeStatus(record.get("status", "root")),
        exec_status=record.get("exec_status"),
        terminal=TerminalReason(terminal) if terminal else None,
        final_answer=record.get("final_answer"),
        prior=float(record.get("prior", 1.0)),
        multiplicity=max(1, int(record.get("multiplicity", 1) or 1)),
        visit_count=int(record.get("visit_count", 0)),
        value_sum=float(record.get("value_sum", 0.0)),
        evaluation=record.get("evaluation"),
        consecutive_errors=int(record.get("consecutive_errors", 0)),
        expanded=bool(record.get("expanded", False)),
        exhausted=bool(record.get("exhausted", False)),
        timings=dict(record.get("timings") or {}),
        outputs=outputs,
        outputs_dropped_chars=int(record.get("outputs_dropped_chars", 0) or 0),
    )


def _from_paper(record: dict[str, Any], where: str) -> Node:
    """A paper node: its step is the last assistant message (and the observation after it, if any)."""
    messages = record.get("messages")
    if not isinstance(messages, list):
        raise TreeFileError(f"{where}: node {record.get('tag')!r} has no 'messages' list")
    tag = _check_tag(record.get("tag"), where)
    node = Node(tag=tag, depth=int(record.get("depth", len(_tag_key(tag)) - 1)),
                visit_count=int(record.get("visit_count") or 0), value_sum=float(record.get("value_sum") or 0.0),
                raw_messages=[dict(m) for m in messages])
    if node.depth == 0:
        return node
    last_assistant = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None)
    if last_assistant is None:
        return node
    node.reply = str(messages[last_assistant].get("content") or "")
    parsed = parse_reply(node.reply)
    node.thought, node.code, node.final_answer = parsed.thought, parsed.code, parsed.answer
    following = messages[last_assistant + 1:]
    if following and following[0].get("role") == "user":
        text = str(following[0].get("content") or "")
        node.observation = text[len(OBSERVATION_PREFIX):].lstrip("\n") if text.startswith(OBSERVATION_PREFIX) else text
    if parsed.status is ReplyStatus.ANSWER:
        node.status = NodeStatus.ANSWER
    elif parsed.status is ReplyStatus.CODE:
        node.status = NodeStatus.CODE_OK
    else:
        node.status = NodeStatus(parsed.status.value)
    if record.get("is_terminal"):
        node.terminal = {
            NodeStatus.ANSWER: TerminalReason.ANSWER,
            NodeStatus.NO_CODE: TerminalReason.NO_CODE,
            NodeStatus.EMPTY_CODE: TerminalReason.EMPTY_CODE,
            NodeStatus.UNPARSABLE: TerminalReason.UNPARSABLE,
        }.get(node.status, TerminalReason.MAX_DEPTH)
    return node


def _node_records(data: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(data, list):
        records = data
    elif isinstance(data, dict) and isinstance(data.get("nodes"), list):
        records = data["nodes"]
    elif isinstance(data, dict) and data and all(isinstance(v, dict) for v in data.values()):
        records = [dict(v, tag=v.get("tag", k)) for k, v in data.items()]
    else:
        raise TreeFileError(f"{where}: expected a list of nodes, {{'nodes': [...]}} or {{tag: node}}")
    if not records or not all(isinstance(r, dict) for r in records):
        raise TreeFileError(f"{where}: no nodes (every node must be a JSON object)")
    for record in records:
        if "tag" not in record:
            raise TreeFileError(f"{where}: a node has no 'tag'")
    return records


def tree_from_dict(data: Any, where: str = "tree", task: Task | None = None) -> Tree:
    """Build a Tree from our layout (either version) or the paper's (recognised by ``format``).

    ``task``: the tree's task as the caller already has it (a resumed search), instead of the stored one.
    """
    records = _node_records(data, where)
    header = data if isinstance(data, dict) and data.get("format") == FORMAT else next(
        (r for r in records if r.get("format") == FORMAT), None)
    ours = header is not None
    if task is None and header is not None and header.get("task"):
        task = task_from_record(header["task"], [Path.cwd()], where=f"{where}: task")
    images = header.get("images") if header is not None else None
    images = images if isinstance(images, dict) else {}
    nodes = sorted(
        (_from_ours(r, images, where) if ours else _from_paper(r, where) for r in records),
        key=lambda n: _tag_key(_check_tag(n.tag, where)),
    )
    if nodes[0].tag.count(".") != 0:
        raise TreeFileError(f"{where}: no root node (a tag without dots, like '0')")
    if len([n for n in nodes if "." not in n.tag]) > 1:
        raise TreeFileError(f"{where}: more than one root node")
    if ours and task is None:  # no task to rebuild prompts from: keep the stored messages
        _attach_stored_messages(nodes, records, where)
    tree = Tree(task, root=nodes[0])
    if not ours and nodes[0].raw_messages is not None:
        nodes[0].status = NodeStatus.ROOT
    for node in nodes[1:]:
        parent_tag = node.tag.rsplit(".", 1)[0]
        if parent_tag not in tree:
            raise TreeFileError(f"{where}: node {node.tag!r} has no parent {parent_tag!r} in the file")
        tree.attach(tree[parent_tag], node)
        if not ours:
            tree[parent_tag].expanded = True
    if ours:  # keep creation order as saved
        order = {str(r["tag"]): i for i, r in enumerate(records)}
        tree.nodes.sort(key=lambda n: order[n.tag])
        for index, node in enumerate(tree.nodes):
            node.order = index
        for node in tree.nodes:
            node.children.sort(key=lambda c: c.order)
    return tree


def _attach_stored_messages(nodes: list[Node], records: list[dict[str, Any]], where: str) -> None:
    """Give each node the messages its record holds: ``turn`` chains (version 2) or ``messages`` (version 1)."""
    if all("turn" in r for r in records):
        stored = node_messages(records, where)
    else:
        stored = {str(r["tag"]): r["messages"] for r in records if isinstance(r.get("messages"), list)}
    for node in nodes:
        if node.tag in stored:
            node.raw_messages = [dict(m) for m in stored[node.tag]]


def load_tree(path: str | Path) -> Tree:
    """Read a tree file (ours or the paper's). Raises TreeFileError naming the file and the problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TreeFileError(f"{path}: tree file not found") from None
    except json.JSONDecodeError as exc:
        raise TreeFileError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    return tree_from_dict(data, where=str(path))

