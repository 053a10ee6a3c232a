"""Policy backend for any OpenAI-compatible server (vLLM, SGLang, llama.cpp server, hosted APIs).

One batch becomes concurrent HTTP requests (a bounded thread pool), one per history, each asking for ``n``
completions — the server batches them and shares the prompt prefix. When a seed is set, each
child is its own request with its own derived seed (one seed for n children once gave identical siblings in
vLLM). Requests go through ``jupiter.llm.endpoint`` (its retry rule: 429, 5xx and connection errors retried with
exponential back-off); anything else is an error that names the URL.

Spec: ``http://HOST:PORT/v1#model=NAME&mode=chat|completions&template=gemma|chatml`` (see ``HttpConfig``).
"""

from __future__ import annotations

import enum
import logging
import math
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pydantic import Field, field_validator

from jupiter.config_model import ConfigModel, Count, PositiveFloat, PositiveInt
from jupiter.llm.base import BasePolicy, RequestUsage, child_seeds, prompt_usage
from jupiter.llm.endpoint import Endpoint, Unreachable
from jupiter.llm.rendering import TemplateName, template_by_name
from jupiter.llm.types import (
    Completion,
    PolicyConnectionError,
    PolicyResponseError,
    PolicySpecError,
    SamplingParams,
)
from jupiter.prompts import Message, render_prompt

__all__ = ["ApiMode", "HttpConfig", "HttpPolicy", "API_KEY_ENV"]

log = logging.getLogger(__name__)

#: Environment variables read for the bearer token, first found wins.
API_KEY_ENV: tuple[str, ...] = ("JUPITER_API_KEY", "OPENAI_API_KEY")

class ApiMode(str, enum.Enum):
    """Which endpoint to call: ``/chat/completions`` (the server applies its chat template) or
    ``/completions`` (we render the prompt with a named template: byte-stable, prefix-cache friendly)."""

    CHAT = "chat"
    COMPLETIONS = "completions"


class HttpConfig(ConfigModel):
    """Settings of the HTTP backend; validated, errors name the field.

    Attributes:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name; None asks the server (``GET /models``, first entry).
        mode: chat or completions.
        template: prompt template for completions mode (``gemma`` or ``chatml``).
        timeout: seconds to wait for a response (per read); connecting has its own ``connect_timeout``.
        max_retries: retries after the first attempt on 429 / 5xx / connection errors.
        backoff: the back-off unit in seconds: the first retry goes at once, the next after 2 × ``backoff``,
            then 4 ×, … up to ``max_backoff`` (a ``Retry-After`` header is honoured, capped the same way).
        concurrency: most requests in flight at once.
        api_key: bearer token; None reads ``JUPITER_API_KEY`` then ``OPENAI_API_KEY``.
    """

    config_error = PolicySpecError

    base_url: str
    model: str | None = None
    mode: ApiMode = ApiMode.CHAT
    template: TemplateName = "gemma"
    timeout: PositiveFloat = 600.0
    connect_timeout: PositiveFloat = 10.0
    max_retries: Count = 5
    backoff: float = Field(0.5, strict=True, ge=0, allow_inf_nan=False)
    max_backoff: PositiveFloat = 30.0
    concurrency: PositiveInt = 8
    api_key: str | None = Field(None, repr=False)  # kept out of logs and tracebacks

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"must be an http(s) URL, got {url!r}")
        return url.rstrip("/")

    @classmethod
    def from_spec(cls, spec: str) -> HttpConfig:
        """Parse ``http://HOST:PORT/v1#model=NAME&mode=...&template=...&timeout=...&retries=...&concurrency=...``.

        Without ``mode``: completions when a ``template`` is given, else chat.
        """
        parts = urlsplit(spec)
        base = urlunsplit((parts.scheme, parts.netloc, parts.path, parts.query, ""))
        options = dict(parse_qsl(parts.fragment, keep_blank_values=True))
        known = {"model", "mode", "template", "timeout", "retries", "concurrency"}
        unknown = set(options) - known
        if unknown:
            raise PolicySpecError(
                f"policy spec {spec!r}: unknown option(s) {sorted(unknown)}; known: {', '.join(sorted(known))}"
            )
        kwargs: dict[str, Any] = {"base_url": base}
        if options.get("model"):
            kwargs["model"] = options["model"]
        if "template" in options:
            kwargs["template"] = options["template"]
        kwargs["mode"] = options.get("mode") or ("completions" if "template" in options else "chat")
        try:
            if "timeout" in options:
                kwargs["timeout"] = float(options["timeout"])
            if "retries" in options:
                kwargs["max_retries"] = int(options["retries"])
            if "concurrency" in options:
                kwargs["concurrency"] = int(options["concurrency"])
        except ValueError as exc:
            raise PolicySpecError(f"policy spec {spec!r}: {exc}") from None
        try:
            return cls(**kwargs)
        except PolicySpecError as exc:
            raise PolicySpecError(f"policy spec {spec!r}: {exc}") from None

    def resolved_api_key(self) -> str | None:
        return self.api_key or next((os.environ[name] for name in API_KEY_ENV if os.environ.get(name)), None)


@dataclass(frozen=True)
class _Job:
    """One HTTP request: ``n`` completions for history ``index`` (children ``first..first+n-1``)."""

    index: int
    first: int
    n: int
    seed: int | None


class HttpPolicy(BasePolicy):
    """OpenAI-compatible HTTP policy. ``sleep`` is injectable so tests need not wait for back-off."""

    name = "http"

    def __init__(self, config: HttpConfig, sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__()
        self.config = config
        self.model_ref = config.model
        self._template = template_by_name(config.template)
        self._pool = ThreadPoolExecutor(max_workers=config.concurrency, thread_name_prefix="jupiter-http")
        self._endpoint = Endpoint(config.base_url, api_key=config.resolved_api_key(),
                                  timeout=(config.connect_timeout, config.timeout), max_retries=config.max_retries,
                                  backoff=config.backoff, max_backoff=config.max_backoff,
                                  pool_size=config.concurrency, sleep=sleep)
        self._model = config.model
        self._model_lock = threading.Lock()

    # ---------------------------------------------------------------------------------- plumbing

    @property
    def model(self) -> str:
        """The model name sent with each request (asked from the server once when not configured)."""
        if self._model is None:
            with self._model_lock:
                if self._model is None:
                    self._model = self._discover_model()
        return self._model

    def _request(self, method: str, path: str, payload: dict | None = None) -> dict:
        """One API call with retries (``jupiter.llm.endpoint``); returns the decoded JSON object."""
        url = f"{self.config.base_url}{path}"
        try:
            done = self._endpoint.call(method, path, payload)
        except Unreachable as exc:
            self._usage.add(requests=1)
            raise PolicyConnectionError(f"cannot reach the model server at {url}: {exc.reason}") from exc
        self._usage.add(requests=done.attempts, retries=done.attempts - 1)
        response = done.response
        if response.status_code >= 400:
            raise PolicyResponseError(
                f"{url} answered HTTP {response.status_code} (attempt {done.attempts} of "
                f"{self.config.max_retries + 1}): {response.text[:500]}"
            )
        try:
            body = response.json()
        except ValueError:
            raise PolicyResponseError(f"{url} returned a response that is not JSON: {response.text[:200]!r}") from None
        if not isinstance(body, dict):
            raise PolicyResponseError(f"{url} returned JSON that is not an object: {str(body)[:200]}")
        return body

    def _discover_model(self) -> str:
        body = self._request("GET", "/models")
        data = body.get("data")
        if not isinstance(data, list) or not data or not isinstance(data[0], dict) or "id" not in data[0]:
            raise PolicyResponseError(
                f"{self.config.base_url}/models lists no model; name one in the spec with #model=NAME"
            )
        return str(data[0]["id"])

    # ---------------------------------------------------------------------------------- generation

    def _generate(self, histories: list[list[Message]], params: SamplingParams) -> list[list[Completion]]:
        jobs: list[_Job] = []
        for i in range(len(histories)):
            if params.seed is None:
                jobs.append(_Job(i, 0, params.n, None))
            else:  # every history and child its own seed: equal histories must not stay clones (vote runs, issue 12)
                jobs.extend(_Job(i, j, 1, s) for j, s in enumerate(child_seeds(params.seed, params.n, salt=i)))
        model = self.model
        futures = [self._pool.submit(self._run_job, model, histories[job.index], job, params) for job in jobs]
        outs: list[list[Completion | None]] = [[None] * params.n for _ in histories]
        usage: list[RequestUsage] = []
        try:
            for job, future in zip(jobs, futures):
                completions, request_usage = future.result()
                usage.append(request_usage)
                for k, completion in enumerate(completions):
                    outs[job.index][job.first + k] = completion
        finally:  # what the finished requests used counts even when another one failed
            self._usage.add(**prompt_usage(usage))
        return [list(o) for o in outs]  # type: ignore[arg-type]

    def _payload(self, model: str, history: list[Message], job: _Job, params: SamplingParams) -> dict:
        payload: dict[str, Any] = {
            "model": model,
            "n": job.n,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.top_k:  # not in OpenAI's API; vLLM, SGLang and llama.cpp servers take it
            payload["top_k"] = params.top_k
        if params.stop:
            payload["stop"] = list(params.stop)
        if job.seed is not None:
            payload["seed"] = job.seed
        if self.config.mode is ApiMode.CHAT:
            payload["messages"] = history
            if params.logprobs:
                payload["logprobs"] = True
        else:
            payload["prompt"] = render_prompt(history, self._template)
            if params.logprobs:
                payload["logprobs"] = 1
        return payload

    def _run_job(self, model: str, history: list[Message], job: _Job,
                 params: SamplingParams) -> tuple[list[Completion], RequestUsage]:
        path = "/chat/completions" if self.config.mode is ApiMode.CHAT else "/completions"
        body = self._request("POST", path, self._payload(model, history, job, params))
        url = f"{self.config.base_url}{path}"
        choices = body.get("choices")
        if not isinstance(choices, list) or len(choices) != job.n:
            found = len(choices) if isinstance(choices, list) else "no"
            raise PolicyResponseError(f"{url} returned {found} choices, expected {job.n}: {str(body)[:300]}")
        if all(isinstance(c, dict) and isinstance(c.get("index"), int) for c in choices):
            choices = sorted(choices, key=lambda c: c["index"])
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        parsed = [self._parse_choice(url, c) for c in choices]
        counts = _token_counts(parsed, usage.get("completion_tokens"))
        prompt_tokens = usage.get("prompt_tokens")  # this request's prompt: the history's length in tokens
        prompt_tokens = prompt_tokens if isinstance(prompt_tokens, int) and prompt_tokens >= 0 else None
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        completions = [
            Completion(text=text, finish_reason=reason, mean_logprob=_mean(logprobs), num_tokens=count,
                       prompt_tokens=prompt_tokens)
            for (text, reason, logprobs), count in zip(parsed, counts)
        ]
        return completions, RequestUsage(job.index, prompt_tokens, cached if isinstance(cached, int) else None)

    def _parse_choice(self, url: str, choice: Any) -> tuple[str, str, list[float] | None]:
        if not isinstance(choice, dict):
            raise PolicyResponseError(f"{url} returned a choice that is not an object: {str(choice)[:200]}")
        if self.config.mode is ApiMode.CHAT:
            message = choice.get("message")
            text = message.get("content") if isinstance(message, dict) else None
            if message is not None and text is None:
                text = ""  # e.g. a reply made only of tool calls
        else:
            text = choice.get("text")
        if not isinstance(text, str):
            raise PolicyResponseError(f"{url} returned a choice without text: {str(choice)[:200]}")
        reason = choice.get("finish_reason") or "unknown"
        return text, str(reason), _choice_logprobs(choice.get("logprobs"))

    def _close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._endpoint.close()


def _choice_logprobs(raw: Any) -> list[float] | None:
    """Sampled-token log-probs from a completions (``token_logprobs``) or chat (``content``) choice."""
    if not isinstance(raw, dict):
        return None
    if isinstance(raw.get("token_logprobs"), list):
        values = raw["token_logprobs"]
    elif isinstance(raw.get("content"), list):
        values = [t.get("logprob") for t in raw["content"] if isinstance(t, dict)]
    else:
        return None
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _mean(values: list[float] | None) -> float | None:
    return sum(values) / len(values) if values else None


def _token_counts(parsed: list[tuple[str, str, list[float] | None]], total: Any) -> list[int]:
    """Generated tokens per choice: exact from log-probs; else the usage total, split by text length.

    The usage block only gives the total over all choices; splitting it in proportion to the characters of
    each choice keeps the sum exact (the search's token budget) while the per-choice split is approximate.
    """
    if all(p[2] is not None for p in parsed):
        return [len(p[2] or []) for p in parsed]
    if not isinstance(total, int) or total < 0:
        return [0] * len(parsed)
    if len(parsed) == 1:
        return [total]
    lengths = [len(p[0]) for p in parsed]
    weight = sum(lengths)
    if weight == 0:
        base = [total // len(parsed)] * len(parsed)
    else:
        base = [total * length // weight for length in lengths]
    for k in range(total - sum(base)):  # hand out the remainder so the sum stays exact
        base[k % len(base)] += 1
    return base
