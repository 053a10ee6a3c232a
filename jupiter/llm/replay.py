"""A scripted policy: replies chosen by rules from a JSON file or Python objects.

Why: search, baselines and CLI demos need a policy whose replies are known in advance, instantly and with no
model. The rules see the last user message of each history (the task prompt or the last observation), so a
script can react to what the notebook printed.

File format (see docs/llm.md)::

    {"default": ["reply", ...],
     "rules": [{"match": "substring of the last message", "replies": ["reply", ...],
                "logprobs": [-0.1, ...]}]}

For each history, the first rule whose ``match`` occurs in the last user message gives the replies, else
``default``. Replies are taken in order, cycling; every history starts at the rule's first reply unless
``cycle_across_calls`` is set, in which case a rule keeps its position from one call to the next (a script
that plays a different reply each time the same observation comes back). ``logprobs`` (optional, same length
as ``replies``) is the ``mean_logprob`` of each reply. Replies may contain the stop string: the text is cut
there, as a server would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from jupiter.config_model import ConfigModel
from jupiter.llm.base import BasePolicy
from jupiter.llm.types import Completion, FinishReason, PolicySpecError, SamplingParams
from jupiter.prompts import Message

__all__ = ["ReplayRule", "ReplayPolicy", "load_replay", "prompt_words"]


class ReplayRule(ConfigModel):
    """Replies for histories whose last user message contains ``match`` (``""`` matches everything)."""

    match: Annotated[str, Field(strict=True)]
    replies: Annotated[tuple[Annotated[str, Field(strict=True)], ...], Field(min_length=1)]
    logprobs: tuple[float, ...] | None = None

    @field_validator("replies", mode="before")
    @classmethod
    def _one_reply(cls, replies: Any) -> Any:
        return (replies,) if isinstance(replies, str) else replies

    @model_validator(mode="after")
    def _a_logprob_per_reply(self) -> ReplayRule:
        if self.logprobs is not None and len(self.logprobs) != len(self.replies):
            raise ValueError(f"logprobs has {len(self.logprobs)} values for {len(self.replies)} replies "
                             f"(rule {self.match!r})")
        return self

    def matches(self, text: str) -> bool:
        return self.match in text


class ReplayPolicy(BasePolicy):
    """Deterministic scripted policy; see the module docstring for the matching rules."""

    name = "replay"

    def __init__(
        self,
        rules: Sequence[ReplayRule | dict] = (),
        default: Sequence[str] | str = ("",),
        default_logprobs: Sequence[float] | None = None,
        cycle_across_calls: bool = False,
    ) -> None:
        super().__init__()
        self.rules: tuple[ReplayRule, ...] = tuple(
            r if isinstance(r, ReplayRule) else _rule(r, i) for i, r in enumerate(rules)
        )
        self.default = ReplayRule(match="", replies=default, logprobs=default_logprobs)
        self.cycle_across_calls = bool(cycle_across_calls)
        self._positions: dict[int, int] = {}
        self._lock = threading.Lock()

    def rule_for(self, history: Sequence[Message]) -> tuple[int, ReplayRule]:
        """The index (-1 for the default) and rule that answer ``history``."""
        users = [m for m in history if m["role"] == "user"]
        last = (users[-1] if users else history[-1])["content"]
        for index, rule in enumerate(self.rules):
            if rule.matches(last):
                return index, rule
        return -1, self.default

    def _generate(self, histories: list[list[Message]], params: SamplingParams) -> list[list[Completion]]:
        outs = []
        with self._lock:
            for history in histories:
                index, rule = self.rule_for(history)
                start = self._positions.get(index, 0) if self.cycle_across_calls else 0
                picks = [(start + j) % len(rule.replies) for j in range(params.n)]
                if self.cycle_across_calls:
                    self._positions[index] = start + params.n
                prompt = prompt_words(history)
                outs.append([replace(_completion(rule, k, params), prompt_tokens=prompt) for k in picks])
        prompt_tokens = sum(c[0].prompt_tokens or 0 for c in outs)
        self._usage.add(prompt_tokens=prompt_tokens, sent_prompt_tokens=prompt_tokens, requests=1)
        return outs


def prompt_words(history: Sequence[Message]) -> int:
    """The replay policy's prompt length: whitespace-separated words of every message (its crude token)."""
    return sum(len(m["content"].split()) for m in history)


def _completion(rule: ReplayRule, k: int, params: SamplingParams) -> Completion:
    text = rule.replies[k]
    reason = FinishReason.STOP.value
    cuts = [text.find(s) for s in params.stop if s in text]
    if cuts:
        text = text[: min(cuts)]
    words = text.split()
    if len(words) > params.max_tokens:  # a crude token count: one token per whitespace-separated word
        text = " ".join(words[: params.max_tokens])
        words = words[: params.max_tokens]
        reason = FinishReason.LENGTH.value
    logprob = rule.logprobs[k] if (params.logprobs and rule.logprobs is not None) else None
    return Completion(text=text, finish_reason=reason, mean_logprob=logprob, num_tokens=max(1, len(words)))


def _rule(raw: Any, index: int, source: str = "rules") -> ReplayRule:
    if not isinstance(raw, dict):
        raise PolicySpecError(f"{source}[{index}] must be an object with 'match' and 'replies'")
    unknown = set(raw) - {"match", "replies", "logprobs"}
    if unknown:
        raise PolicySpecError(f"{source}[{index}] has unknown keys {sorted(unknown)}")
    if "replies" not in raw:
        raise PolicySpecError(f"{source}[{index}] has no 'replies'")
    try:
        return ReplayRule(
            match=raw.get("match", ""), replies=raw["replies"], logprobs=raw.get("logprobs"))
    except (TypeError, ValueError) as exc:
        raise PolicySpecError(f"{source}[{index}]: {exc}") from None


def load_replay(path: str | Path) -> ReplayPolicy:
    """A ``ReplayPolicy`` from a JSON script file; errors name the file and the bad entry."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PolicySpecError(f"replay script {path} does not exist") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise PolicySpecError(f"replay script {path} is not readable JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise PolicySpecError(f"replay script {path} must hold a JSON object with 'rules' and/or 'default'")
    unknown = set(raw) - {"rules", "default", "default_logprobs", "cycle_across_calls"}
    if unknown:
        raise PolicySpecError(f"replay script {path} has unknown keys {sorted(unknown)}")
    rules_raw = raw.get("rules", [])
    if not isinstance(rules_raw, list):
        raise PolicySpecError(f"replay script {path}: 'rules' must be a list")
    try:
        rules = [_rule(r, i, source=f"{path}: rules") for i, r in enumerate(rules_raw)]
        return ReplayPolicy(
            rules=rules,
            default=raw.get("default", [""]),
            default_logprobs=raw.get("default_logprobs"),
            cycle_across_calls=bool(raw.get("cycle_across_calls", False)),
        )
    except ValueError as exc:
        if isinstance(exc, PolicySpecError):
            raise
        raise PolicySpecError(f"replay script {path}: {exc}") from None
