"""ShareGPT SFT rows → token ids and labels, rendered exactly as the policy backends render prompts.

Why the rendering goes through ``jupiter.llm.rendering.render_for_tokenizer``: the fine-tuned model must see
at training time the very tokens a backend sends it at inference. So a sample is built from the backend's own
prompts: for its last assistant turn K the text is ``render(messages[:K]) + reply_K + <end_of_turn>``; every
earlier assistant turn k sits inside that text right after ``render(messages[:k])`` (which must be a prefix of
it: checked, or the sample is refused), and runs to its end-of-turn marker. The whole text is tokenized once
(the tokenizer adds BOS, as it does for a backend's prompt); a token counts for the loss when it starts inside
an assistant span. So the loss covers every assistant reply *and* the end-of-turn token after it (the model
learns to stop), and nothing else: not the system prompt, the task, nor the observations. A row may name gpt
turns to leave out of the loss (``no_loss_turns``: indices in ``conversations``): the deliberate mistakes of
synthesized error-and-fix solutions, which the model should see in its context but not learn to write.

Input rows are what ``nbqa_pipeline/export.py`` writes (LLaMA-Factory's ShareGPT layout):
``{"conversations": [{"from": "human"|"gpt", "value": str}, ...], "system": str, "id": str}``, optionally
``"no_loss_turns": [int, ...]``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jupiter.llm.rendering import END_OF_TURN_TOKENS, render_for_tokenizer
from jupiter.prompts import ChatTemplate, Message

__all__ = ["IGNORE", "SftDataError", "Conversation", "EncodedSample", "EncodeReport", "read_sharegpt",
           "file_sha256", "end_marker", "encode_conversation", "encode_all"]

#: Label of a position that does not count for the loss (PyTorch's cross-entropy ``ignore_index``).
IGNORE = -100
_ROLES = {"human": "user", "gpt": "assistant"}


class SftDataError(ValueError):
    """Unusable training data; the message names the file and line (or the sample id)."""


@dataclass(frozen=True)
class Conversation:
    """One ShareGPT row as chat messages (roles ``system`` / ``user`` / ``assistant``)."""

    id: str
    messages: tuple[Message, ...]
    line: int  # 1-based line in the input file
    no_loss: frozenset[int] = frozenset()  # indices in ``messages`` of assistant turns left out of the loss


@dataclass(frozen=True)
class EncodedSample:
    """Token ids and labels of one conversation (``labels[i]`` is ``IGNORE`` or ``input_ids[i]``)."""

    id: str
    input_ids: tuple[int, ...]
    labels: tuple[int, ...]
    truncated: bool

    @property
    def loss_tokens(self) -> int:
        return sum(1 for label in self.labels if label != IGNORE)


@dataclass(frozen=True)
class EncodeReport:
    rows: int
    samples: int
    truncated: int  # cut at max_len but kept
    dropped_no_loss: int  # nothing left to learn after the cut
    tokens: int
    loss_tokens: int

    def to_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_sharegpt(path: Path) -> list[Conversation]:
    """Parse an SFT JSONL file; ``SftDataError`` names the file and line of the first bad row.

    A row must hold ``conversations``: human/gpt turns, alternating, starting with human, with at least one
    gpt turn. A trailing human turn (nothing to learn from) is dropped. Blank lines are skipped.
    """
    path = Path(path)
    if not path.is_file():
        raise SftDataError(f"SFT data file {path} does not exist" if not path.exists()
                           else f"SFT data path {path} is not a file")
    out: list[Conversation] = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SftDataError(f"{path} line {number}: not valid JSON ({exc.msg})") from None
            out.append(_conversation(row, f"{path} line {number}", number))
    if not out:
        raise SftDataError(f"{path}: no samples (the file is empty)")
    return out


def _conversation(row: Any, where: str, number: int) -> Conversation:
    if not isinstance(row, dict):
        raise SftDataError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
    turns = row.get("conversations")
    if not isinstance(turns, list) or not turns:
        raise SftDataError(f"{where}: 'conversations' must be a non-empty list")
    system = row.get("system") or ""
    if not isinstance(system, str):
        raise SftDataError(f"{where}: 'system' must be a string")
    messages: list[Message] = [{"role": "system", "content": system}] if system.strip() else []
    expected = "human"
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("from") not in _ROLES or not isinstance(turn.get("value"), str):
            raise SftDataError(f"{where}: conversations[{index}] must be {{'from': 'human'|'gpt', 'value': str}}")
        if turn["from"] != expected:
            raise SftDataError(f"{where}: conversations[{index}] is from {turn['from']!r}, expected {expected!r} "
                               "(turns must alternate human/gpt, starting with human)")
        messages.append({"role": _ROLES[turn["from"]], "content": turn["value"]})
        expected = "gpt" if expected == "human" else "human"
    if messages[-1]["role"] == "user":
        messages.pop()
    if not any(m["role"] == "assistant" for m in messages):
        raise SftDataError(f"{where}: no gpt turn to learn from")
    skip = row.get("no_loss_turns") or []
    if not isinstance(skip, list) or any(not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(turns)
                                         or turns[k]["from"] != "gpt" for k in skip):
        raise SftDataError(f"{where}: 'no_loss_turns' must list indices of gpt turns in 'conversations'")
    offset = 1 if messages[0]["role"] == "system" else 0  # turn k is message k + offset
    sample_id = row.get("id")
    return Conversation(id=str(sample_id) if sample_id is not None else f"line-{number}",
                        messages=tuple(messages), line=number, no_loss=frozenset(k + offset for k in skip))


def end_marker(tokenizer: Any, template: ChatTemplate | None) -> str:
    """The text that closes an assistant turn in this rendering (``<end_of_turn>`` for Gemma).

    Found by rendering a two-turn chat, so it follows whatever ``render_for_tokenizer`` does.
    """
    probe = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"},
             {"role": "user", "content": "V"}]
    head = render_for_tokenizer(probe[:1], tokenizer, template)
    full = render_for_tokenizer(probe, tokenizer, template)
    if not full.startswith(head + "A"):
        raise SftDataError("the chat rendering is not prefix-stable: the prompt of a turn is not the start of "
                           "the next turn's prompt, so training samples cannot match inference prompts")
    rest = full[len(head) + 1:]
    found = [(rest.find(t), t) for t in (*END_OF_TURN_TOKENS, getattr(tokenizer, "eos_token", None) or "") if t
             and rest.find(t) >= 0]
    if not found:
        raise SftDataError(f"cannot find the end-of-turn marker of this chat rendering in {rest[:80]!r}")
    return min(found)[1]


def encode_conversation(conversation: Conversation, tokenizer: Any, template: ChatTemplate | None,
                        max_len: int, marker: str | None = None) -> EncodedSample | None:
    """Token ids and labels of one conversation (see the module docstring); None when the cut at ``max_len``
    leaves no assistant token. ``marker``: the end-of-turn text (``end_marker``), computed when not given."""
    marker = marker or end_marker(tokenizer, template)
    messages = list(conversation.messages)
    assistant_at = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    last = assistant_at[-1]
    text = render_for_tokenizer(messages[:last], tokenizer, template) + messages[last]["content"] + marker
    spans: list[tuple[int, int]] = []
    for index in assistant_at:
        prompt = render_for_tokenizer(messages[:index], tokenizer, template)
        if not text.startswith(prompt):
            raise SftDataError(f"sample {conversation.id} (line {conversation.line}): the prompt of assistant turn "
                               f"{index} is not a prefix of the rendered conversation")
        if index in conversation.no_loss:
            continue
        end = text.find(marker, len(prompt))
        spans.append((len(prompt), end + len(marker)))
    encoded = tokenizer(text, return_offsets_mapping=True, add_special_tokens=True)
    ids: list[int] = list(encoded["input_ids"])
    labels = [IGNORE] * len(ids)
    for position, (start, stop) in enumerate(encoded["offset_mapping"]):
        if stop > start and any(a <= start < b for a, b in spans):
            labels[position] = ids[position]
    truncated = len(ids) > max_len
    ids, labels = ids[:max_len], labels[:max_len]
    if all(label == IGNORE for label in labels[1:]):
        return None
    return EncodedSample(id=conversation.id, input_ids=tuple(ids), labels=tuple(labels), truncated=truncated)


def encode_all(conversations: Sequence[Conversation], tokenizer: Any, template: ChatTemplate | None,
               max_len: int) -> tuple[list[EncodedSample], EncodeReport]:
    """Encode every conversation; the report counts the cut and the dropped ones (never silently)."""
    marker = end_marker(tokenizer, template)
    samples: list[EncodedSample] = []
    dropped = 0
    for conversation in conversations:
        sample = encode_conversation(conversation, tokenizer, template, max_len, marker)
        if sample is None:
            dropped += 1
        else:
            samples.append(sample)
    report = EncodeReport(rows=len(conversations), samples=len(samples),
                          truncated=sum(s.truncated for s in samples), dropped_no_loss=dropped,
                          tokens=sum(len(s.input_ids) for s in samples),
                          loss_tokens=sum(s.loss_tokens for s in samples))
    return samples, report
