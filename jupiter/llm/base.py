"""What every backend shares: history validation, usage accounting, per-child seeds, context management.

Backends subclass ``BasePolicy`` and implement ``_generate``; the base class checks the histories, times the
call, checks that every history got exactly ``n`` completions, and keeps the counters.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from jupiter.llm.types import Completion, PolicyError, PolicyStats, SamplingParams
from jupiter.prompts import Message

if TYPE_CHECKING:
    from jupiter.llm.spec import PolicyChoice

__all__ = ["BasePolicy", "UsageCounter", "RequestUsage", "prompt_usage", "child_seeds", "validate_histories"]

_ROLES = ("system", "user", "assistant")


def child_seeds(seed: int, n: int, salt: int = 0) -> list[int]:
    """``n`` distinct, reproducible 31-bit seeds derived from ``seed`` (one per sibling completion).

    Why: with one seed and n > 1, vLLM once returned n identical samples. ``salt`` separates the children of
    different histories in one batch (pass the history's index), so equal histories still get distinct
    samples while the whole batch stays reproducible.
    """
    out = []
    for j in range(n):
        digest = hashlib.blake2b(f"{seed}:{salt}:{j}".encode(), digest_size=8).digest()
        out.append(int.from_bytes(digest, "little") & 0x7FFFFFFF)
    return out


def validate_histories(histories: Sequence[Sequence[Message]]) -> list[list[Message]]:
    """Check the shape of a batch of chat histories; errors name the history and message index."""
    if isinstance(histories, (str, bytes)) or not isinstance(histories, Sequence):
        raise TypeError(f"histories must be a list of message lists, got {type(histories).__name__}")
    out = []
    for i, history in enumerate(histories):
        if isinstance(history, (str, bytes, dict)) or not isinstance(history, Sequence) or not history:
            raise ValueError(f"histories[{i}] must be a non-empty list of messages, got {history!r:.80}")
        for j, message in enumerate(history):
            if not isinstance(message, dict) or message.get("role") not in _ROLES:
                raise ValueError(f"histories[{i}][{j}] must be a dict with role in {_ROLES}, got {message!r:.80}")
            if not isinstance(message.get("content"), str):
                raise ValueError(f"histories[{i}][{j}]['content'] must be a str")
        out.append([dict(m) for m in history])
    return out


@dataclass(frozen=True)
class RequestUsage:
    """What one backend request reported: the history it continued (index in the batch), its prompt tokens and
    the prompt tokens the backend's prefix cache served (None: not reported)."""

    history: int
    prompt_tokens: int | None
    cached_tokens: int | None = None


def prompt_usage(requests: Sequence[RequestUsage], samples_per_request: int = 1) -> dict[str, int]:
    """``UsageCounter.add`` deltas for one batch, by ``PolicyStats``' definitions.

    Per history: ``prompt_tokens`` once; ``sent_prompt_tokens`` over its requests (times
    ``samples_per_request`` for a backend that re-reads the prompt per sample); its least-cached request's
    cache hits are reuse of what came before (``cached_prompt_tokens``), the rest of its requests' hits are the
    same prompt served again to its siblings (``sibling_cached_prompt_tokens``).
    """
    by_history: dict[int, list[RequestUsage]] = {}
    for request in requests:
        if request.prompt_tokens is not None:
            by_history.setdefault(request.history, []).append(request)
    deltas: dict[str, int] = {"prompt_tokens": 0, "sent_prompt_tokens": 0}
    cached = sibling = 0
    reported = False
    for group in by_history.values():
        deltas["prompt_tokens"] += max(int(r.prompt_tokens or 0) for r in group)
        deltas["sent_prompt_tokens"] += sum(int(r.prompt_tokens or 0) for r in group) * samples_per_request
        hits = [int(r.cached_tokens) for r in group if r.cached_tokens is not None]
        if hits:
            reported = True
            cached += min(hits)
            sibling += sum(hits) - min(hits)
    if reported:
        deltas["cached_prompt_tokens"] = cached
        deltas["sibling_cached_prompt_tokens"] = sibling
    return deltas


class UsageCounter:
    """Thread-safe usage counters (HTTP requests finish on pool threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stats = PolicyStats()

    def add(self, **deltas: float) -> None:
        with self._lock:
            values = {}
            for key, delta in deltas.items():
                current = getattr(self._stats, key)
                values[key] = delta if current is None else current + delta
            self._stats = replace(self._stats, **values)

    def snapshot(self) -> PolicyStats:
        with self._lock:
            return self._stats


class BasePolicy:
    """Shared behaviour of the backends; subclasses implement ``_generate`` and optionally ``_close``."""

    #: short backend name for logs and reports
    name = "base"
    #: what ``load_policy`` resolved the spec to (None for a backend built directly)
    choice: PolicyChoice | None = None
    #: the longest prompt + completion the backend takes, in tokens, where it has a fixed one (vLLM)
    context_window: int | None = None
    #: the model it runs, for reports: a local backend's folder, or the served model an HTTP spec names (None:
    #: not one model, or a name only the server knows; reading it never asks a server)
    model_ref: str | None = None

    def __init__(self) -> None:
        self._usage = UsageCounter()
        self._closed = False

    def generate(self, histories: Sequence[Sequence[Message]], params: SamplingParams) -> list[list[Completion]]:
        """Sample ``params.n`` completions per history; one list per history, in input order."""
        if self._closed:
            raise PolicyError(f"{self.name} policy is closed")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be a SamplingParams, got {type(params).__name__}")
        batch = validate_histories(histories)
        start = time.perf_counter()
        outs = self._generate(batch, params) if batch else []
        seconds = time.perf_counter() - start
        if len(outs) != len(batch) or any(len(o) != params.n for o in outs):
            raise PolicyError(
                f"{self.name} policy returned {[len(o) for o in outs]} completions for {len(batch)} histories "
                f"with n={params.n}"
            )
        self._usage.add(
            calls=1,
            prompts=len(batch),
            completions=sum(len(o) for o in outs),
            completion_tokens=sum(c.num_tokens for o in outs for c in o),
            seconds=seconds,
        )
        return outs

    def _generate(self, histories: list[list[Message]], params: SamplingParams) -> list[list[Completion]]:
        raise NotImplementedError

    def stats(self) -> PolicyStats:
        return self._usage.snapshot()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._close()

    def _close(self) -> None:
        """Release backend resources (called once)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
