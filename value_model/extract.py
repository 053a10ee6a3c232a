"""Training-set extraction: tree files → (path, Q) samples for the value model.

Per tree, answer/terminal nodes with Q > 0 count as correct and Q < 0 as wrong (Q = value_sum / visits);
nodes that ended in an infrastructure failure (sandbox timeout, dead runtime, memory limit, sandbox error)
are skipped — they say nothing about the model's path. We sample at most 4 correct and 4 wrong terminals
(at most 2 wrong when none is correct, so that hopeless trees do not flood the set with −1s), add every
ancestor of each sampled node, label each node with its own Q, and de-duplicate identical paths across trees
(their visits and value sums are pooled).

``ExtractConfig.target = "tree-centred"`` labels each node with its Q minus the mean Q of its tree's samples
instead (a deliberate deviation from the paper, off by default). Why: the search compares values only within a
tree (siblings in selection, a tree's answers in the value decision), and a model trained on raw Q learned
which questions end well rather than which step of a question is right (data/value_model/curve/README.md).

Nodes are read as plain dicts with the paper's fields (``tag, depth, messages, is_terminal, visit_count,
value_sum, value``) — tags "0", "0.1", "0.1.2" define the parents — so both the paper's files and ours
(which add ``status``, ``final_answer``, ``reward``, ...) are read without importing the search package.
Our lean files (``jupiter-tree`` version 2) store each node's own ``turn`` instead of its ``messages``: a
node's messages are those of the node its ``extends`` names plus its ``turn`` (``with_messages`` rebuilds
them with ``jupiter.tree_records.chain_messages``, as ``search.tree_io.node_messages`` does). A file holds a
list of nodes, an object with a ``nodes`` list, an object ``{tag: node}``, or (``.jsonl``) one such tree per line.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from jupiter.config_model import ConfigModel, Count
from jupiter.prompts import Message, render_prompt
from jupiter.tree_records import chain_messages
from value_model.config import ConfigError, TemplateName

__all__ = [
    "ExtractError",
    "ExtractConfig",
    "Sample",
    "INFRASTRUCTURE_STATUSES",
    "read_trees",
    "with_messages",
    "is_infrastructure_failure",
    "node_q",
    "select_tags",
    "extract_samples",
    "centre_per_tree",
    "write_samples",
    "read_samples",
]

log = logging.getLogger(__name__)

#: ``status`` / ``exec_status`` / ``terminal`` values that mean the infrastructure failed, not the model.
INFRASTRUCTURE_STATUSES = frozenset(
    {"infrastructure", "timeout", "died", "memory_limit", "memory-limit", "sandbox_error", "sandbox-error",
     "unresponsive", "lost"}
)
#: The paper's observations when its sandbox failed (its files store no status field).
_PAPER_INFRA_OBSERVATIONS = ("Observation:\nCode execution failed with status:", "Observation:\nSandbox error:")


class ExtractError(ValueError):
    """A tree file is unusable; the message names the file and the problem."""


class ExtractConfig(ConfigModel):
    """How many paths of each kind are taken from one tree (``select_tags``), with which seed and template."""

    config_error = ConfigError

    max_correct: Count = 4
    max_wrong: Count = 4
    max_wrong_if_no_correct: Count = 2
    seed: int = 0
    template: TemplateName = TemplateName.GEMMA
    target: Literal["q", "tree-centred"] = "q"


@dataclass(frozen=True)
class Sample:
    """One training example: a path (messages), its rendered text and its value label Q in [-1, 1]."""

    messages: tuple[Message, ...]
    text: str
    value: float
    visits: int
    value_sum: float
    sources: tuple[str, ...] = ()  # "file#tag" of every tree node that had this exact path
    is_terminal: bool = False
    depth: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"messages": [dict(m) for m in self.messages], "text": self.text, "value": self.value,
                "visits": self.visits, "value_sum": self.value_sum, "sources": list(self.sources),
                "is_terminal": self.is_terminal, "depth": self.depth}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "sample") -> Sample:
        try:
            messages = tuple(dict(m) for m in data["messages"])
            value = float(data["value"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ExtractError(f"{where}: a sample needs 'messages' (list) and 'value' (number): {exc}") from exc
        if not -1.0 <= value <= 1.0:
            raise ExtractError(f"{where}: value {value} is outside [-1, 1]")
        for message in messages:
            if "role" not in message or "content" not in message:
                raise ExtractError(f"{where}: every message needs 'role' and 'content'")
        return cls(messages=messages, text=str(data.get("text", "")), value=value,
                   visits=int(data.get("visits", 1)), value_sum=float(data.get("value_sum", value)),
                   sources=tuple(data.get("sources", ())), is_terminal=bool(data.get("is_terminal", False)),
                   depth=int(data.get("depth", 0)))


# ------------------------------------------------------------------------------------------ reading


def read_trees(path: str | Path) -> Iterator[list[dict[str, Any]]]:
    """Yield the node list of every tree in a file (JSON: one tree; JSONL: one tree per line)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExtractError(f"{path}: cannot read: {exc}") from exc
    if path.suffix == ".jsonl":
        docs = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                docs.append((f"{path}:{number}", _loads(line, f"{path}:{number}")))
    else:
        docs = [(str(path), _loads(text, str(path)))]
    for where, doc in docs:
        nodes = doc
        if isinstance(doc, dict):
            if isinstance(doc.get("nodes"), list):
                nodes = doc["nodes"]
            elif doc and all(isinstance(v, dict) for v in doc.values()):  # {tag: node}
                nodes = [dict(v, tag=v.get("tag", k)) for k, v in doc.items()]
        if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
            raise ExtractError(f"{where}: expected a list of nodes or an object with a 'nodes' list")
        if nodes and all("turn" in n and "messages" not in n for n in nodes):
            nodes = with_messages(nodes, where)
        for node in nodes:
            missing = [k for k in ("tag", "messages", "visit_count", "value_sum") if k not in node]
            if missing:
                raise ExtractError(f"{where}: node {node.get('tag', '?')!r} lacks field(s) {missing}")
        yield nodes


def with_messages(nodes: Sequence[dict[str, Any]], where: str = "tree") -> list[dict[str, Any]]:
    """Copies of lean nodes (``turn`` + ``extends``) with their full ``messages`` rebuilt.

    ``messages(node) = messages(extends) + turn``; the root (no ``extends``) has its ``turn`` as messages.
    Raises ExtractError naming the node when a chain is broken.
    """
    done = chain_messages(nodes, where, ExtractError)
    return [dict(n, messages=done[str(n.get("tag"))]) for n in nodes]


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExtractError(f"{where}: invalid JSON: {exc}") from exc


def node_q(node: dict[str, Any]) -> float | None:
    """Q = value_sum / visit_count, or None for an unvisited node (it has no label)."""
    visits = int(node.get("visit_count") or 0)
    if visits <= 0:
        return None
    return float(node["value_sum"]) / visits


def is_infrastructure_failure(node: dict[str, Any]) -> bool:
    """True when the node ended because the sandbox failed (never the model's fault)."""
    for key in ("status", "exec_status", "terminal", "terminal_reason"):
        value = node.get(key)
        if isinstance(value, str) and value.lower() in INFRASTRUCTURE_STATUSES:
            return True
    messages = node.get("messages") or []
    if messages and messages[-1].get("role") == "user":
        content = str(messages[-1].get("content", ""))
        if content.startswith(_PAPER_INFRA_OBSERVATIONS):
            return True
    return False


def _ancestors(tag: str) -> list[str]:
    parts = tag.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def select_tags(nodes: Sequence[dict[str, Any]], config: ExtractConfig, rng: random.Random) -> list[str]:
    """The tags to train on from one tree: sampled correct/wrong terminals plus all their ancestors."""
    correct, wrong = [], []
    for node in nodes:
        if not node.get("is_terminal") or is_infrastructure_failure(node):
            continue
        q = node_q(node)
        if q is None or q == 0:
            continue
        (correct if q > 0 else wrong).append(str(node["tag"]))
    correct.sort(key=_tag_key)
    wrong.sort(key=_tag_key)
    wrong_cap = config.max_wrong if correct else config.max_wrong_if_no_correct
    chosen = rng.sample(correct, min(len(correct), config.max_correct))
    chosen += rng.sample(wrong, min(len(wrong), wrong_cap))
    tags = set(chosen)
    for tag in chosen:
        tags.update(_ancestors(tag))
    return sorted(tags, key=_tag_key)


def _tag_key(tag: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else 0 for p in tag.split("."))


@dataclass
class _Pool:
    messages: tuple[Message, ...]
    text: str
    visits: int = 0
    value_sum: float = 0.0
    sources: list[str] = field(default_factory=list)
    is_terminal: bool = False
    depth: int = 0


def extract_samples(paths: Iterable[str | Path], config: ExtractConfig = ExtractConfig()) -> list[Sample]:
    """Samples from every tree in ``paths``, de-duplicated by rendered text, in first-seen order.

    Sampling is seeded per file (``seed`` and the file name), so the result does not depend on the order
    the files are given in.
    """
    template = config.template.template()
    pools: dict[str, _Pool] = {}
    for path in paths:
        path = Path(path)
        for index, nodes in enumerate(read_trees(path)):
            rng = random.Random(f"{config.seed}:{path.name}:{index}")
            by_tag = {str(n["tag"]): n for n in nodes}
            for tag in select_tags(nodes, config, rng):
                node = by_tag.get(tag)
                if node is None:
                    log.warning("%s: ancestor %s of a sampled node is missing; skipped", path, tag)
                    continue
                if node_q(node) is None:
                    continue
                messages = tuple(dict(m) for m in node["messages"])
                text = render_prompt(messages, template)
                pool = pools.setdefault(text, _Pool(messages=messages, text=text,
                                                     depth=int(node.get("depth", tag.count(".")))))
                pool.visits += int(node["visit_count"])
                pool.value_sum += float(node["value_sum"])
                pool.sources.append(f"{path.name}#{tag}" if index == 0 else f"{path.name}:{index}#{tag}")
                pool.is_terminal = pool.is_terminal or bool(node.get("is_terminal"))
    samples = [
        Sample(messages=p.messages, text=p.text, value=max(-1.0, min(1.0, p.value_sum / p.visits)),
               visits=p.visits, value_sum=p.value_sum, sources=tuple(p.sources), is_terminal=p.is_terminal,
               depth=p.depth)
        for p in pools.values()
    ]
    return centre_per_tree(samples) if config.target == "tree-centred" else samples


def _tree_of(sample: Sample) -> str:
    """The tree a sample came from: the file (and index) of its first source, ``file#tag`` -> ``file``."""
    return sample.sources[0].rsplit("#", 1)[0] if sample.sources else ""


def centre_per_tree(samples: Sequence[Sample]) -> list[Sample]:
    """Each sample's value minus the mean value of the samples of its tree, clipped to [-1, 1]; ``visits`` and
    ``value_sum`` keep the raw statistics. A tree whose samples all end alike gives values near 0: it says nothing
    about which of its steps is better."""
    by_tree: dict[str, list[float]] = {}
    for sample in samples:
        by_tree.setdefault(_tree_of(sample), []).append(sample.value)
    means = {tree: sum(values) / len(values) for tree, values in by_tree.items()}
    return [replace(s, value=max(-1.0, min(1.0, s.value - means[_tree_of(s)]))) for s in samples]


def write_samples(samples: Iterable[Sample], path: str | Path) -> int:
    """Write samples as JSONL (one object per line); returns how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for sample in samples:
            handle.write(json.dumps(sample.to_dict(), ensure_ascii=False) + "\n")
            count += 1
    return count


def read_samples(path: str | Path) -> list[Sample]:
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ExtractError(f"{path}: cannot read: {exc}") from exc
    samples = []
    for number, line in enumerate(lines, 1):
        if line.strip():
            samples.append(Sample.from_dict(_loads(line, f"{path}:{number}"), f"{path}:{number}"))
    if not samples:
        raise ExtractError(f"{path}: no samples")
    return samples
