"""The one way a path becomes model input, shared by training and scoring.

The paper's code truncated paths one way when training the value model and another way when scoring with it,
so the model was scored on text it never saw in training. Here both sides call ``prepare_path``: it keeps the
system and task turns, then the most recent steps that fit the token budget, replaces the dropped middle
steps by one marker message, renders the result with ``jupiter.prompts.render_prompt`` and tokenizes it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from jupiter.prompts import GEMMA, ChatTemplate, Message, render_prompt

__all__ = ["PreparedPath", "TRUNCATION_MARKER", "CUT_MARKER", "truncate_messages", "prepare_path", "path_key",
           "split_path"]

#: The user message standing in for dropped steps ({n}: how many assistant steps were dropped).
TRUNCATION_MARKER = "[{n} earlier step(s) omitted to fit the context]"
#: Put in front of the kept end of a step whose beginning was cut ({n}: characters cut).
CUT_MARKER = "[... {n} characters cut to fit the context ...]\n"


@dataclass(frozen=True)
class PreparedPath:
    """A path ready for the model: the rendered (truncated) text, its token ids and how much was dropped."""

    text: str
    input_ids: tuple[int, ...]
    dropped_steps: int


def split_path(messages: Sequence[Message]) -> tuple[list[Message], list[list[Message]]]:
    """(prefix, steps): the prefix is every message up to and including the first user turn (system + task);
    each step is an assistant message with the user messages (observations) that follow it."""
    messages = [dict(m) for m in messages]
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), None)
    cut = 0 if first_user is None else first_user + 1
    prefix, rest = messages[:cut], messages[cut:]
    steps: list[list[Message]] = []
    for message in rest:
        if message.get("role") == "assistant" or not steps:
            steps.append([message])
        else:
            steps[-1].append(message)
    return prefix, steps


def _marker(n: int) -> Message:
    return {"role": "user", "content": TRUNCATION_MARKER.format(n=n)}


def truncate_messages(
    messages: Sequence[Message],
    count_tokens: Callable[[str], int],
    max_tokens: int,
    template: ChatTemplate = GEMMA,
) -> tuple[list[Message], int]:
    """Fit a path into ``max_tokens`` (as counted by ``count_tokens`` on the rendered text).

    Returns (messages, dropped_steps). Keeps the prefix (system + task) and the most recent steps whose
    rendered text fits; the dropped oldest middle steps become one marker message. When not even the latest
    step fits, its beginning is cut and its end kept (``_cut_front``): a value estimate must see the state it
    values, and the newest text (the latest output or answer) is what defines that state.
    """
    if count_tokens(render_prompt(messages, template)) <= max_tokens:
        return [dict(m) for m in messages], 0
    prefix, steps = split_path(messages)
    # Estimate each step's cost separately (one tokenizer call per step), then verify the whole.
    base = count_tokens(render_prompt(prefix + [_marker(len(steps))], template))
    costs = [count_tokens("".join(_render_turns(step, template))) for step in steps]
    keep, used = 0, base
    for cost in reversed(costs):
        if used + cost > max_tokens:
            break
        used += cost
        keep += 1
    keep = max(keep, 1) if steps else 0
    while True:
        dropped = len(steps) - keep
        head = prefix + ([_marker(dropped)] if dropped else [])
        kept = [m for step in steps[len(steps) - keep:] for m in step]
        candidate = head + kept
        if count_tokens(render_prompt(candidate, template)) <= max_tokens:
            return candidate, dropped
        if keep <= 1:
            if not steps:
                return candidate, dropped  # the prefix alone is too long: prepare_path cuts tokens on the left
            return head + _cut_front(steps[-1], head, count_tokens, max_tokens, template), dropped
        keep -= 1


def _cut_step(step: Sequence[Message], keep_chars: int) -> list[Message]:
    """The last ``keep_chars`` characters of a step's contents, the first kept message marked as cut."""
    total = sum(len(m["content"]) for m in step)
    to_cut = total - keep_chars
    if to_cut <= 0:
        return [dict(m) for m in step]
    out: list[Message] = []
    remaining = to_cut
    for message in step:
        content = message["content"]
        if remaining >= len(content):
            remaining -= len(content)
            continue  # cut away whole: the marker on the next kept message says so
        kept = content[remaining:]
        if remaining > 0 or not out:
            kept = CUT_MARKER.format(n=to_cut) + kept
        remaining = 0
        out.append({**message, "content": kept})
    if not out:  # nothing left: keep the last message as a bare marker so the reader knows text was cut
        out.append({**step[-1], "content": CUT_MARKER.format(n=to_cut)})
    return out


def _cut_front(step: Sequence[Message], head: list[Message], count_tokens: Callable[[str], int],
               max_tokens: int, template: ChatTemplate) -> list[Message]:
    """The longest end of ``step`` that fits after ``head`` (binary search over kept characters)."""
    low, high = 0, sum(len(m["content"]) for m in step)
    while low < high:
        middle = (low + high + 1) // 2
        if count_tokens(render_prompt(head + _cut_step(step, middle), template)) <= max_tokens:
            low = middle
        else:
            high = middle - 1
    return _cut_step(step, low)


def _render_turns(step: Sequence[Message], template: ChatTemplate) -> list[str]:
    parts = []
    for message in step:
        parts.append(template.turn_start.format(role=template.role(message["role"])))
        parts.append(message["content"])
        parts.append(template.turn_end)
    return parts


def prepare_path(messages: Sequence[Message], tokenizer: Any, max_tokens: int,
                 template: ChatTemplate = GEMMA) -> PreparedPath:
    """Truncate, render and tokenize one path (with the tokenizer's special tokens, e.g. BOS).

    ``input_ids`` has at most ``max_tokens`` ids. Training and scoring both call this, so a state is seen
    by the model byte for byte the same in both. Should the text still be too long (a system + task prefix
    longer than the budget), tokens are cut after the first special tokens, on the left, never on the right:
    the newest text and the assistant-turn opener stay.
    """

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=True)["input_ids"])

    kept, dropped = truncate_messages(messages, count, max_tokens, template)
    text = render_prompt(kept, template)
    ids = list(tokenizer(text, add_special_tokens=True)["input_ids"])
    if len(ids) > max_tokens:
        lead = len(tokenizer("", add_special_tokens=True)["input_ids"])  # BOS etc.: kept in front
        lead = min(lead, max_tokens - 1)
        ids = ids[:lead] + ids[len(ids) - (max_tokens - lead):]
    return PreparedPath(text=text, input_ids=tuple(int(i) for i in ids), dropped_steps=dropped)


def path_key(messages: Sequence[Message], template: ChatTemplate = GEMMA) -> str:
    """Cache key of a path: sha256 of its full rendered text (cheap: no tokenizer call)."""
    return hashlib.sha256(render_prompt(messages, template).encode("utf-8")).hexdigest()
