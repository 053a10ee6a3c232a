"""The policy vocabulary: sampling settings, completions, usage counters, the protocol and its errors.

No logic and no backend imports live here (pydantic alone, for the validated ``SamplingParams``), so that the
search (and anything else that only *talks* to a policy) can import these types without pulling in requests,
torch or vLLM.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Protocol, runtime_checkable

from pydantic import Field, StringConstraints, field_validator

from jupiter.config_model import ConfigModel, Count, Flag, PositiveInt
from jupiter.prompts import STOP_SEQUENCES, Message

__all__ = [
    "SamplingParams",
    "Completion",
    "FinishReason",
    "PolicyStats",
    "Policy",
    "PolicyError",
    "PolicySpecError",
    "PolicyConnectionError",
    "PolicyResponseError",
]


class PolicyError(RuntimeError):
    """A policy backend could not produce completions (infrastructure failure, never the model's fault)."""


class PolicySpecError(PolicyError, ValueError):
    """A policy spec string (``load_policy``) or a backend option is malformed; the message names it."""


class PolicyConnectionError(PolicyError):
    """The model server could not be reached (after retries); the message names the URL."""


class PolicyResponseError(PolicyError):
    """The model server answered with an error status or a response we cannot read; names the URL."""


class FinishReason(str, enum.Enum):
    """Why a completion ended. A ``LENGTH`` reply was cut by ``max_tokens`` and is not an answer.

    ``Completion.finish_reason`` is a plain ``str`` (servers may report values we do not know, e.g.
    ``"content_filter"``); compare with these members, which are ``str`` too.
    """

    STOP = "stop"  # a stop string or the end-of-sequence token
    LENGTH = "length"  # max_tokens reached


class SamplingParams(ConfigModel):
    """Per-call sampling settings, validated at construction (errors name the field).

    Attributes:
        n: completions per history (>= 1).
        temperature: >= 0; 0 means greedy decoding.
        top_p: nucleus mass in (0, 1]: sample from the smallest set of most likely tokens whose probability
            reaches it (1: off).
        top_k: sample from the ``top_k`` most likely tokens only (0: off). With ``top_p``, top-p applies to the
            distribution renormalised over the top-k set (vLLM's and transformers' order).
        max_tokens: most new tokens per completion (>= 1).
        stop: strings that end a completion; the stop string itself is not part of ``Completion.text``.
        seed: makes sampling reproducible; every child of every history gets its own seed derived from it
            (``child_seeds``), because one seed for all children once gave identical siblings in vLLM, and
            equal histories in one batch (vote runs with equal first replies) must not stay clones.
        logprobs: ask the backend for token log-probabilities (fills ``Completion.mean_logprob``). Costs
            throughput, so only ask when the search prior needs it.
    """

    n: PositiveInt = 1
    temperature: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] = 1.0
    top_p: Annotated[float, Field(strict=True, gt=0, le=1)] = 1.0
    top_k: Count = 0
    max_tokens: PositiveInt = 512
    stop: tuple[Annotated[str, StringConstraints(strict=True, min_length=1)], ...] = STOP_SEQUENCES
    seed: Annotated[int, Field(strict=True)] | None = None
    logprobs: Flag = False

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop_string(cls, stop: Any) -> Any:
        return (stop,) if isinstance(stop, str) else stop

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Completion:
    """One sampled continuation of a history.

    Attributes:
        text: the generated text, without the stop string that ended it.
        finish_reason: ``"stop"`` (stop string / end of sequence), ``"length"`` (cut by max_tokens), or what
            the server said.
        mean_logprob: mean log-probability (natural log) per generated token, when logprobs were asked for
            and the backend gives them; else None. The search uses it as the PUCT prior.
        num_tokens: generated tokens (including the tokens of the stop string, as servers count them).
        prompt_tokens: tokens of the prompt this completion continued, when the backend knows them; the same
            number on every sibling of one history (count it once per history, not once per completion).
    """

    text: str
    finish_reason: str
    mean_logprob: float | None = None
    num_tokens: int = 0
    prompt_tokens: int | None = None

    @property
    def truncated(self) -> bool:
        """True when max_tokens cut the reply: such a reply is not an answer."""
        return self.finish_reason == FinishReason.LENGTH


@dataclass(frozen=True)
class PolicyStats:
    """Usage counters of one policy since it was built (every report states tokens, calls and time).

    One definition of prompt tokens everywhere (policy stats, ``result.json``'s ``stats.prompt_tokens``, the
    service's progress): the tokens of each history the policy was asked to continue, counted once per
    history and call — not once per sample, whatever number of backend requests the K samples took. So the
    trees' ``stats.prompt_tokens`` of one solve add up to the policy's ``prompt_tokens``.

    Attributes:
        calls: ``generate`` calls.
        prompts: histories sent (one per history, whatever ``n``).
        completions: completions returned.
        prompt_tokens: prompt tokens of the histories (see above), when the backend reports them (0 otherwise).
        completion_tokens: generated tokens.
        seconds: wall-clock seconds spent inside ``generate``.
        requests: backend requests (HTTP requests, engine requests or calls).
        retries: retried HTTP requests (429 / 5xx / connection errors).
        sent_prompt_tokens: prompt tokens as the backend received them, summed over its requests: K times a
            history's tokens when each of its K samples is its own request (seeded sampling on vLLM and HTTP
            servers: one seed for n samples gave identical siblings) or when the backend re-reads the prompt
            per sample (transformers ``num_return_sequences``); else equal to ``prompt_tokens``.
        cached_prompt_tokens: prompt tokens of the histories served from a prefix cache by what came before
            them — earlier turns of the path, other nodes of the batch with the same task prefix — when the
            backend reports cache hits (per history, its least-cached request: the first to be prefilled).
        sibling_cached_prompt_tokens: prompt tokens served from the cache because the same history was sent
            again for another of its K samples (within-expansion sharing; a cost of per-sample requests, not
            reuse across turns). None when the backend reports no cache hits.
        prefix_cache_hit_rate: cached_prompt_tokens / prompt_tokens — reuse across turns and nodes only.
        sibling_cache_hit_rate: sibling_cached_prompt_tokens / (sent_prompt_tokens - prompt_tokens): how much
            of the repeated sending the cache absorbed.
    """

    calls: int = 0
    prompts: int = 0
    completions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    requests: int = 0
    retries: int = 0
    sent_prompt_tokens: int = 0
    cached_prompt_tokens: int | None = None
    sibling_cached_prompt_tokens: int | None = None

    @property
    def prefix_cache_hit_rate(self) -> float | None:
        if self.cached_prompt_tokens is None or self.prompt_tokens <= 0:
            return None
        return self.cached_prompt_tokens / self.prompt_tokens

    @property
    def sibling_cache_hit_rate(self) -> float | None:
        repeated = self.sent_prompt_tokens - self.prompt_tokens
        if self.sibling_cached_prompt_tokens is None or repeated <= 0:
            return None
        return self.sibling_cached_prompt_tokens / repeated

    @property
    def tokens_per_second(self) -> float:
        return self.completion_tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["prefix_cache_hit_rate"] = self.prefix_cache_hit_rate
        out["sibling_cache_hit_rate"] = self.sibling_cache_hit_rate
        out["tokens_per_second"] = self.tokens_per_second
        return out


@runtime_checkable
class Policy(Protocol):
    """What the search sees of a model: batched sampling of continuations for chat histories."""

    def generate(self, histories: Sequence[Sequence[Message]], params: SamplingParams) -> list[list[Completion]]:
        """Sample ``params.n`` completions for each history.

        Returns one list per history, in input order, each holding exactly ``params.n`` completions.
        Raises ``PolicyError`` (or a subclass) on infrastructure failures.
        """
        ...

    def stats(self) -> PolicyStats:
        """Usage counters since the policy was built."""
        ...

    def close(self) -> None:
        """Release what the policy holds (sessions, thread pools, engines). Idempotent."""
        ...
