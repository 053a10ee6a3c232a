"""The search tree: nodes and the few structural operations on them (no search logic here).

A node is one notebook step: the model's thought and code (or final answer), the cell's observation, and the
search statistics (prior, visits, value). It holds the cell's ``execution`` record in memory only (not written
to tree files) and no process: the executor maps live nodes to their sandbox states (``search.executor``).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from jupiter.prompts import Message, Turn, build_messages
from jupiter.task import Task
from search.protocols import ExecutionLike

__all__ = ["NodeStatus", "TerminalReason", "Node", "Tree", "MODEL_FAILURES"]


class NodeStatus(str, enum.Enum):
    """What happened at this step."""

    ROOT = "root"
    CODE_OK = "code-ok"  # the cell ran (output may be truncated)
    CODE_ERROR = "code-error"  # the cell raised: the model's fault
    ANSWER = "answer"  # a final answer
    NO_CODE = "no-code"
    EMPTY_CODE = "empty-code"
    UNPARSABLE = "unparsable"
    TRUNCATED_REPLY = "truncated-reply"  # an answer cut by max_tokens (finish_reason "length")
    INFRASTRUCTURE = "infrastructure"  # timeout, memory limit, dead runtime, sandbox failure


class TerminalReason(str, enum.Enum):
    """Why a branch ended here."""

    ANSWER = "answer"
    UNPARSABLE = "unparsable"
    NO_CODE = "no-code"
    EMPTY_CODE = "empty-code"
    TRUNCATED_REPLY = "truncated-reply"
    TOO_MANY_ERRORS = "too-many-errors"
    MAX_DEPTH = "max-depth"
    CONTEXT_LIMIT = "context-limit"
    INFRASTRUCTURE = "infrastructure"  # never counted as a model failure


#: Terminal reasons that are the model's fault (value −1 in every mode).
MODEL_FAILURES = frozenset(
    {
        TerminalReason.UNPARSABLE,
        TerminalReason.NO_CODE,
        TerminalReason.EMPTY_CODE,
        TerminalReason.TRUNCATED_REPLY,
        TerminalReason.TOO_MANY_ERRORS,
        TerminalReason.MAX_DEPTH,
        TerminalReason.CONTEXT_LIMIT,
    }
)


@dataclass(eq=False)
class Node:
    """One step of a notebook path. Mutable: the search updates visits and values in place.

    ``tag`` is the path of child indices from the root ("0", "0.1", "0.1.2"); ``depth`` is the number of steps
    from the root (root 0). ``value`` is Q = value_sum / visit_count (0 when unvisited).
    """

    tag: str
    depth: int
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    thought: str = ""
    code: str | None = None
    observation: str | None = None
    reply: str = ""  # the raw model reply
    finish_reason: str | None = None
    status: NodeStatus = NodeStatus.ROOT
    exec_status: str | None = None  # sandbox ExecStatus value of the cell, when one ran
    terminal: TerminalReason | None = None
    final_answer: str | None = None
    prior: float = 1.0
    multiplicity: int = 1  # how many of the K sampled sibling replies had exactly this text (votes, prior)
    visit_count: int = 0
    value_sum: float = 0.0
    evaluation: float | None = None  # the reward or estimate this node was backed up with
    consecutive_errors: int = 0
    expanded: bool = False
    exhausted: bool = False  # no expandable node left below (or here)
    order: int = 0  # creation order in the tree (ties in decisions go to the earliest)
    timings: dict[str, float] = field(default_factory=dict)
    outputs: list[dict[str, Any]] = field(default_factory=list)  # nbformat outputs of the cell
    outputs_dropped_chars: int = 0  # characters of the cell's output text not kept (sandbox cap, tree-file cap)
    raw_messages: list[Message] | None = None  # set only for nodes read from the paper's files
    execution: ExecutionLike | None = field(default=None, repr=False)  # sandbox Execution (never serialised)

    @property
    def is_terminal(self) -> bool:
        return self.terminal is not None

    @property
    def is_answer(self) -> bool:
        return self.terminal is TerminalReason.ANSWER

    @property
    def is_malformed(self) -> bool:
        """An unparsable reply, or one with no or empty code (terminal or, in inference, still expandable)."""
        return self.status in (NodeStatus.UNPARSABLE, NodeStatus.NO_CODE, NodeStatus.EMPTY_CODE)

    @property
    def is_infrastructure_failure(self) -> bool:
        return self.terminal is TerminalReason.INFRASTRUCTURE

    @property
    def value(self) -> float:
        return self.value_sum / self.visit_count if self.visit_count else 0.0

    @property
    def expandable(self) -> bool:
        """A leaf that may still be expanded."""
        return not self.is_terminal and not self.expanded and not self.exhausted

    def turn(self) -> Turn | None:
        """This step as a prompt turn (None for the root and for failed replies, which have no clean turn)."""
        if self.status in (NodeStatus.CODE_OK, NodeStatus.CODE_ERROR) or (
                self.status is NodeStatus.INFRASTRUCTURE and self.code is not None):
            return Turn(thought=self.thought, code=self.code, observation=self.observation)
        if self.status is NodeStatus.ANSWER:
            return Turn(thought=self.thought, answer=self.final_answer)
        return None

    def path(self) -> list[Node]:
        """Root … self."""
        nodes = []
        node: Node | None = self
        while node is not None:
            nodes.append(node)
            node = node.parent
        return nodes[::-1]


class Tree:
    """The nodes of one search, in creation order, with lookup by tag."""

    def __init__(self, task: Task | None, root: Node | None = None) -> None:
        self.task = task
        self.root = root if root is not None else Node(tag="0", depth=0)
        self.nodes: list[Node] = []
        self._by_tag: dict[str, Node] = {}
        self._register(self.root)

    def _register(self, node: Node) -> None:
        if node.tag in self._by_tag:
            raise ValueError(f"tree: duplicate node tag {node.tag!r}")
        node.order = len(self.nodes)
        self.nodes.append(node)
        self._by_tag[node.tag] = node

    def add_child(self, parent: Node, **fields_: Any) -> Node:
        """Create a child of ``parent`` tagged ``<parent tag>.<n>`` (n counts from 1)."""
        child = Node(tag=f"{parent.tag}.{len(parent.children) + 1}", depth=parent.depth + 1, parent=parent,
                     **fields_)
        parent.children.append(child)
        self._register(child)
        return child

    def attach(self, parent: Node | None, node: Node) -> None:
        """Insert an already-built node (used by loaders)."""
        node.parent = parent
        if parent is not None:
            parent.children.append(node)
        self._register(node)

    def drop_since(self, order: int) -> list[Node]:
        """Remove every node created at or after creation index ``order`` (an unfinished step); returns them.

        A parent left with no children is unexpanded again, so the tree is as it was before that step.
        """
        dropped = self.nodes[order:]
        if order < 1 or not dropped:
            return []
        del self.nodes[order:]
        for node in dropped:
            del self._by_tag[node.tag]
            parent = node.parent
            if parent is not None and parent.order < order:
                parent.children = [c for c in parent.children if c.order < order]
                parent.expanded = bool(parent.children)
        return dropped

    def __getitem__(self, tag: str) -> Node:
        return self._by_tag[tag]

    def __contains__(self, tag: str) -> bool:
        return tag in self._by_tag

    def __len__(self) -> int:
        return len(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)

    def turns(self, node: Node) -> list[Turn]:
        return [t for t in (n.turn() for n in node.path()[1:]) if t is not None]

    def messages(self, node: Node) -> list[Message]:
        """The chat up to and including ``node`` (what the paper's files store as ``messages``)."""
        if node.raw_messages is not None:
            return [dict(m) for m in node.raw_messages]
        if self.task is None:
            raise ValueError("tree: messages need the task (this tree was loaded without one)")
        messages = build_messages(self.task, self.turns(node))
        if node.turn() is None and node.status is not NodeStatus.ROOT:
            messages.append({"role": "assistant", "content": node.reply})
        return messages

    def history_base(self, node: Node) -> Node | None:
        """The nearest ancestor whose ``messages`` are a prefix of ``node``'s (None for the root).

        Usually the parent; a step with no clean turn (an unparsable or code-less reply that inference keeps
        expandable) is left out of its children's history, so they continue its own base. Tree files store
        each node's messages as the base's plus its own turn.
        """
        if node.parent is None:
            return None
        if node.raw_messages is None:
            base = node.parent
            while base.parent is not None and base.turn() is None:
                base = base.parent
            return base
        mine = node.raw_messages
        ancestor: Node | None = node.parent
        while ancestor is not None:
            theirs = self.messages(ancestor)
            if len(theirs) <= len(mine) and mine[:len(theirs)] == theirs:
                return ancestor
            ancestor = ancestor.parent
        return None

    def answers(self) -> list[Node]:
        """Every answer node, in creation order."""
        return [n for n in self.nodes if n.is_answer]
