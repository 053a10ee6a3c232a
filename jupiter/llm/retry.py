"""Retrying one HTTP request to a model server: which failures earn another try, and how long to wait.

Shared by the policy backend (``jupiter.llm.openai_http``) and the NbQA pipeline's chat client
(``nbqa_pipeline.llm_client``), so that both treat connection errors, timeouts, 429/5xx and ``Retry-After``
alike. The caller keeps its own error types and counters: this module only decides and waits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import requests

__all__ = ["RETRY_STATUS", "Backoff", "Attempts", "TransportFailure", "send_with_retries"]

log = logging.getLogger(__name__)

#: Statuses that mean "try again later" (rate limit, overloaded or restarting server); other 4xx/5xx are final.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off: ``first`` seconds before the first retry, doubled each time, at most ``cap``.
    A numeric ``Retry-After`` header replaces the computed wait (capped the same way)."""

    first: float
    cap: float

    def delay(self, retry: int, response: requests.Response | None = None) -> float:
        wait = self.first * (2**retry)
        if response is not None:
            try:
                wait = float(response.headers.get("Retry-After", ""))
            except ValueError:
                pass
        return min(self.cap, max(0.0, wait))


@dataclass(frozen=True)
class Attempts:
    """The outcome of :func:`send_with_retries`: the last response and how many requests it took."""

    response: requests.Response
    count: int


class TransportFailure(Exception):
    """Every attempt failed to get a response (connection refused, reset, timed out); ``cause`` is the last."""

    def __init__(self, cause: Exception, attempts: int) -> None:
        super().__init__(f"{type(cause).__name__}: {cause} ({attempts} attempts)")
        self.cause = cause
        self.attempts = attempts


def send_with_retries(
    send: Callable[[], requests.Response],
    *,
    max_retries: int,
    backoff: Backoff,
    sleep: Callable[[float], None],
    what: str,
    on_attempt: Callable[[int], None] | None = None,
) -> Attempts:
    """Call ``send()`` until its response has a final status or ``max_retries`` retries are spent.

    Returns the last response, which may still carry a retryable status when the retries ran out: the caller
    turns it into its own error. Raises :class:`TransportFailure` when the last attempt got no response at
    all. ``on_attempt(i)`` is called before attempt ``i`` (0 = the first request), for usage counters.
    """
    attempts = max_retries + 1
    for attempt in range(attempts):
        if on_attempt is not None:
            on_attempt(attempt)
        last = attempt == attempts - 1
        try:
            response = send()
        except (requests.ConnectionError, requests.Timeout) as exc:
            if last:
                raise TransportFailure(exc, attempts) from exc
            wait = backoff.delay(attempt)
            log.warning("%s: %s; retrying in %.1f s", what, type(exc).__name__, wait)
            sleep(wait)
            continue
        if response.status_code in RETRY_STATUS and not last:
            wait = backoff.delay(attempt, response)
            log.warning("%s answered HTTP %d; retrying in %.1f s", what, response.status_code, wait)
            sleep(wait)
            continue
        return Attempts(response, attempt + 1)
    raise AssertionError("unreachable")  # the last attempt always returns or raises
