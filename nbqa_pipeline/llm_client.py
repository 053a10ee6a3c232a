"""A small chat client for any OpenAI-compatible endpoint (vLLM, SGLang, llama.cpp server, hosted APIs).

It calls through the same HTTP client as the policy backend, ``jupiter.llm.endpoint`` (its retry rule:
connection errors, timeouts, 429 and 5xx retried with exponential back-off honouring ``Retry-After``; other
statuses fail at once). What it adds is the pipeline's call: one plain chat completion per prompt (JSON mode,
per-call temperature) with token and cost accounting, where the policy samples n continuations. ``sleep`` is
injectable.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from jupiter.config_model import ConfigModel, Count, PositiveFloat, PositiveInt
from jupiter.llm.endpoint import Answer, Endpoint, Unreachable

__all__ = ["LLMConfig", "ChatReply", "ChatClient", "LLMError", "Usage"]

log = logging.getLogger(__name__)


class LLMError(RuntimeError):
    """The endpoint could not answer (after retries, or a non-retryable status): an infrastructure failure."""


class LLMConfig(ConfigModel):
    """Where and how to call the model. ``from_env`` reads ``NBQA_LLM_BASE_URL`` / ``NBQA_LLM_MODEL`` /
    ``NBQA_LLM_API_KEY`` (falling back to ``OPENAI_BASE_URL`` / ``OPENAI_MODEL`` / ``OPENAI_API_KEY``)."""

    base_url: str = Field(pattern=r"^https?://")
    model: str = Field(min_length=1)
    api_key: str | None = Field(None, repr=False)  # kept out of logs and tracebacks
    timeout: PositiveFloat = 120.0  # seconds per request
    max_retries: Count = 4  # retries of one request on transport errors, 429 and 5xx
    backoff: float = Field(1.0, ge=0)  # back-off unit in seconds: retries at once, then after 2x, 4x ...
    max_backoff: PositiveFloat = 60.0  # longest wait between retries, also for a server's Retry-After
    temperature: float = 0.0
    max_tokens: PositiveInt = 2048
    json_mode: bool = False  # send response_format={"type": "json_object"} (not every server supports it)
    price_prompt_per_mtok: float = 0.0  # currency units per million prompt tokens
    price_completion_per_mtok: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> LLMConfig:
        env = os.environ if env is None else env
        base = overrides.pop("base_url", None) or env.get("NBQA_LLM_BASE_URL") or env.get("OPENAI_BASE_URL")
        model = overrides.pop("model", None) or env.get("NBQA_LLM_MODEL") or env.get("OPENAI_MODEL")
        key = overrides.pop("api_key", None) or env.get("NBQA_LLM_API_KEY") or env.get("OPENAI_API_KEY")
        if not base:
            raise ValueError("no LLM endpoint: set NBQA_LLM_BASE_URL (or OPENAI_BASE_URL) or pass --llm-url")
        if not model:
            raise ValueError("no LLM model: set NBQA_LLM_MODEL (or OPENAI_MODEL) or pass --model")
        return cls(base_url=base, model=model, api_key=key, **overrides)


@dataclass(frozen=True)
class ChatReply:
    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Usage:
    calls: int
    failed_calls: int
    retries: int
    prompt_tokens: int
    completion_tokens: int
    cost: float


class ChatClient:
    """``chat(messages) -> ChatReply`` against ``{base_url}/chat/completions``; thread-safe counters."""

    def __init__(self, config: LLMConfig, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config
        base = config.base_url.rstrip("/")
        self._endpoint = Endpoint(base if base.endswith("/v1") else base + "/v1", api_key=config.api_key,
                                  timeout=config.timeout, max_retries=config.max_retries, backoff=config.backoff,
                                  max_backoff=config.max_backoff, sleep=sleep)
        self._lock = threading.Lock()
        self._calls = self._failed = self._retries = self._prompt = self._completion = 0

    @property
    def url(self) -> str:
        return self._endpoint.base_url + "/chat/completions"

    def usage(self) -> Usage:
        with self._lock:
            cost = (self._prompt * self.config.price_prompt_per_mtok
                    + self._completion * self.config.price_completion_per_mtok) / 1e6
            return Usage(self._calls, self._failed, self._retries, self._prompt, self._completion, round(cost, 6))

    def chat(self, messages: Sequence[Mapping[str, str]], *, temperature: float | None = None,
             max_tokens: int | None = None) -> ChatReply:
        """One completion for ``messages``; raises LLMError when the endpoint cannot answer."""
        payload: dict[str, Any] = {
            "model": self.config.model,
            "messages": [dict(m) for m in messages],
            "temperature": self.config.temperature if temperature is None else temperature,
            "max_tokens": max_tokens or self.config.max_tokens,
        }
        if self.config.json_mode:
            payload["response_format"] = {"type": "json_object"}
        try:
            done = self._endpoint.call("POST", "/chat/completions", payload)
        except Unreachable as exc:
            self._count_failure()
            raise LLMError(f"POST {self.url}: {exc.reason}") from exc
        with self._lock:
            self._retries += done.attempts - 1
        if done.response.status_code != 200:
            self._count_failure()
            raise LLMError(f"POST {self.url}: HTTP {done.response.status_code}: {done.response.text[:200]}")
        return self._reply(done)

    def _count_failure(self) -> None:
        with self._lock:
            self._failed += 1

    def _reply(self, done: Answer) -> ChatReply:
        try:
            data = done.response.json()
            choice = data["choices"][0]
            text = choice["message"].get("content") or ""
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            with self._lock:
                self._failed += 1
            raise LLMError(f"POST {self.url}: reply is not a chat completion ({exc!r})") from None
        usage = data.get("usage") or {}
        reply = ChatReply(text, choice.get("finish_reason"), int(usage.get("prompt_tokens") or 0),
                          int(usage.get("completion_tokens") or 0))
        with self._lock:
            self._calls += 1
            self._prompt += reply.prompt_tokens
            self._completion += reply.completion_tokens
        return reply
