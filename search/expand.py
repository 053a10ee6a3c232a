"""Expansion: from K sampled replies to child nodes.

Small steps, each testable alone: ``draft_children`` (parse, drop exact duplicates, priors), ``classify_reply``
(what a reply that runs no code ends as), ``apply_execution`` (what a cell's outcome makes of the child) and
``check_limits`` (depth and context). ``settle`` is the one place a node's status and terminal reason are set.
The executor (``search.executor``) does the I/O between them: the batched policy call, branching the parent's
state, running the cells; ``search.step`` strings them together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jupiter.llm.types import SamplingParams
from jupiter.prompts import Message, ParsedReply, ReplyStatus, parse_reply
from search.config import PriorRule, SearchConfig
from search.protocols import CompletionLike, ExecutionLike
from search.puct import priors_from_logprobs
from search.tree import Node, NodeStatus, TerminalReason

__all__ = [
    "ChildDraft",
    "make_sampling_params",
    "draft_children",
    "classify_reply",
    "apply_execution",
    "check_limits",
    "settle",
    "estimate_tokens",
    "REPEAT_TEMPERATURE",
    "repeats_failed_cell",
]

#: the temperature a repeat of a failed cell is sampled again at (``SearchConfig.repeat_retries``), unless the
#: search's own is higher: the paper's collection temperature. A small policy that has just seen its cell fail
#: writes the same cell again in about a third of its code replies at 0.2-0.7 (docs/search.md).
REPEAT_TEMPERATURE = 1.0


def make_sampling_params(config: SearchConfig, n: int, seed: int | None,
                         temperature: float | None = None) -> SamplingParams:
    """The sampling settings of one expansion call (the stop strings are ``SamplingParams``' default)."""
    return SamplingParams(
        n=n,
        temperature=config.temperature if temperature is None else temperature,
        top_p=config.top_p,
        max_tokens=config.max_tokens,
        seed=seed,
        logprobs=config.wants_logprobs,
    )


def repeats_failed_cell(node: Node, reply: str) -> bool:
    """True when ``reply``'s cell is ``node``'s own cell again (the same non-blank lines) and that cell raised:
    the child would branch the state the error left and run the same code, which fails the same way."""
    if node.code is None or node.status is not NodeStatus.CODE_ERROR:
        return False
    code = parse_reply(reply).code
    return code is not None and _code_lines(code) == _code_lines(node.code)


def _code_lines(code: str) -> list[str]:
    return [line.rstrip() for line in code.splitlines() if line.strip()]


@dataclass(frozen=True)
class ChildDraft:
    """One kept reply, parsed, with its prior among the kept siblings and how often it was sampled."""

    text: str
    parsed: ParsedReply
    finish_reason: str
    prior: float
    num_tokens: int
    multiplicity: int = 1


def draft_children(completions: Sequence[CompletionLike], drop_duplicates: bool,
                   prior_rule: PriorRule | str = PriorRule.EXP) -> tuple[list[ChildDraft], int]:
    """Parse K completions; fold exact-duplicate texts into the first. Returns (drafts, duplicates folded).

    Why fold rather than drop: running the same cell twice wastes a branch, but the policy sampling an answer
    several times is exactly the frequency a majority vote needs, so the kept draft's ``multiplicity`` counts
    the copies (votes, and a prior as large as the copies' together). Priors follow ``prior_rule``
    (``search.puct.priors_from_logprobs``).
    """
    kept: list[CompletionLike] = []
    counts: list[int] = []
    index_of: dict[str, int] = {}
    duplicates = 0
    for completion in completions:
        if drop_duplicates and completion.text in index_of:
            duplicates += 1
            counts[index_of[completion.text]] += 1
            continue
        index_of.setdefault(completion.text, len(kept))
        kept.append(completion)
        counts.append(1)
    priors = priors_from_logprobs([c.mean_logprob for c in kept], prior_rule, counts)
    drafts = [
        ChildDraft(
            text=c.text,
            parsed=parse_reply(c.text),
            finish_reason=str(c.finish_reason or ""),
            prior=prior,
            num_tokens=int(c.num_tokens or 0),
            multiplicity=count,
        )
        for c, prior, count in zip(kept, priors, counts)
    ]
    return drafts, duplicates


_NO_RUN = {
    ReplyStatus.UNPARSABLE: (NodeStatus.UNPARSABLE, TerminalReason.UNPARSABLE),
    ReplyStatus.NO_CODE: (NodeStatus.NO_CODE, TerminalReason.NO_CODE),
    ReplyStatus.EMPTY_CODE: (NodeStatus.EMPTY_CODE, TerminalReason.EMPTY_CODE),
}


def classify_reply(draft: ChildDraft, malformed_terminal: bool = True,
                   ) -> tuple[NodeStatus, TerminalReason | None] | None:
    """The outcome of a reply that runs no code; None when its code must run.

    An answer cut by ``max_tokens`` (finish_reason "length") is not an answer. A malformed reply (unparsable,
    no code, empty code) ends its branch unless ``malformed_terminal`` is False: then its terminal reason is
    None and the node stays expandable (it is still scored −1; see ``search.evaluate``).
    """
    status = draft.parsed.status
    if status is ReplyStatus.ANSWER:
        if draft.finish_reason == "length":
            return NodeStatus.TRUNCATED_REPLY, TerminalReason.TRUNCATED_REPLY
        return NodeStatus.ANSWER, TerminalReason.ANSWER
    if status is ReplyStatus.CODE:
        return None
    node_status, terminal = _NO_RUN[status]
    return node_status, (terminal if malformed_terminal else None)


_MALFORMED = frozenset({NodeStatus.UNPARSABLE, NodeStatus.NO_CODE, NodeStatus.EMPTY_CODE})


def settle(child: Node, parent: Node | None, status: NodeStatus, config: SearchConfig,
           terminal: TerminalReason | None = None) -> None:
    """Set ``child``'s status and terminal reason: the one place they are set (by its reply's outcome, its cell's
    and the limits). A cell that raised, or a malformed reply that stays expandable, is one more error in a row
    after ``parent``'s, and past ``config.max_consecutive_errors`` the branch ends; a cell that ran clears the
    count."""
    if terminal is None and (status is NodeStatus.CODE_ERROR or status in _MALFORMED):
        child.consecutive_errors = (parent.consecutive_errors if parent is not None else 0) + 1
        if child.consecutive_errors > config.max_consecutive_errors:
            terminal = TerminalReason.TOO_MANY_ERRORS
    elif status is NodeStatus.CODE_OK:
        child.consecutive_errors = 0
    child.status, child.terminal = status, terminal


def apply_execution(child: Node, parent: Node, execution: ExecutionLike, config: SearchConfig) -> None:
    """Record a cell's outcome on ``child``: observation, outputs, status, error count, terminal reason."""
    child.execution = execution
    child.exec_status = execution.status.value
    child.outputs = list(execution.outputs)
    child.observation = execution.observation()
    if execution.status.is_infrastructure:  # TIMEOUT, MEMORY_LIMIT, DISK_LIMIT, DIED: never the model's fault
        settle(child, parent, NodeStatus.INFRASTRUCTURE, config, TerminalReason.INFRASTRUCTURE)
    else:
        settle(child, parent, NodeStatus.CODE_ERROR if child.exec_status == "error" else NodeStatus.CODE_OK, config)


def estimate_tokens(messages: Sequence[Message], chars_per_token: float) -> int:
    """Token count of a chat from its length (used when the policy has no tokenizer)."""
    return int(sum(len(str(m.get("content", ""))) for m in messages) / chars_per_token) + 4 * len(messages)


def check_limits(
    child: Node,
    messages: Callable[[], list[Message]],
    config: SearchConfig,
    count_tokens: Callable[[list[Message]], int] | None,
) -> None:
    """End a live branch deeper than ``max_depth`` or when its next prompt would not fit the context.

    The depth rule is the reference code's: a node is terminal when ``depth > max_depth`` (10), so nodes at
    depth ``max_depth`` are still expanded.
    """
    if child.is_terminal:
        return
    if child.depth > config.max_depth:
        settle(child, child.parent, child.status, config, TerminalReason.MAX_DEPTH)
        return
    history = messages()
    tokens = count_tokens(history) if count_tokens is not None else estimate_tokens(history, config.chars_per_token)
    if tokens + config.max_tokens > config.context_limit:
        settle(child, child.parent, child.status, config, TerminalReason.CONTEXT_LIMIT)
