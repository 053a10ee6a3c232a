"""Retrying one HTTP request to a model server: which failures earn another try, and how long to wait.

Shared by the policy backend (``jupiter.llm.openai_http``) and the NbQA pipeline's chat client
(``nbqa_pipeline.llm_client``), so that both treat connection errors, timeouts, 429/5xx and ``Retry-After``
alike. The caller keeps its own error types and counters: this module only decides and waits.

A refused connection is treated apart from the other transport failures: nothing listens at that address (a
wrong port, a server that is not started), so backing off for 15 s with a warning per try only hides the
mistake. It gets one quick retry (a server that is just restarting) and then fails with one short cause.
Timeouts, resets and 429/5xx keep the exponential back-off: those servers exist and are busy.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import requests

__all__ = ["RETRY_STATUS", "REFUSED_RETRY_S", "Backoff", "Attempts", "TransportFailure", "connection_refused",
           "send_with_retries"]

log = logging.getLogger(__name__)

#: Statuses that mean "try again later" (rate limit, overloaded or restarting server); other 4xx/5xx are final.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})

#: Seconds before the single retry of a refused connection (capped by the back-off's ``cap``).
REFUSED_RETRY_S = 0.25


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
    """Every attempt failed to get a response (connection refused, reset, timed out).

    ``cause`` is the last failure: for a refused connection the operating system's ``ConnectionRefusedError``
    itself (its text is one short line, where the ``requests`` wrapper's is three nested reprs), with
    ``refused`` True; otherwise the ``requests`` exception. ``attempts`` counts the requests sent.
    """

    def __init__(self, cause: Exception, attempts: int, refused: bool = False) -> None:
        super().__init__(f"{type(cause).__name__}: {cause} ({attempts} attempts)")
        self.cause = cause
        self.attempts = attempts
        self.refused = refused


def connection_refused(exc: BaseException) -> ConnectionRefusedError | None:
    """The ``ConnectionRefusedError`` somewhere inside a ``requests``/``urllib3`` exception, else None.

    ``requests`` wraps it as ConnectionError(MaxRetryError(reason=NewConnectionError(...))), chained by
    ``__cause__``/``__context__``, ``reason`` and ``args``; this walks all of those (cycles are skipped).
    """
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        item = todo.pop()
        if not isinstance(item, BaseException) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, ConnectionRefusedError):
            return item
        todo.extend((item.__cause__, item.__context__, getattr(item, "reason", None), *item.args))
    return None


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

    A refused connection is retried once, after ``REFUSED_RETRY_S`` and without a warning; a second refusal
    (or a refusal on the last attempt) raises at once with ``TransportFailure.refused`` set.
    """
    attempts = max_retries + 1
    refusals = 0
    for attempt in range(attempts):
        if on_attempt is not None:
            on_attempt(attempt)
        last = attempt == attempts - 1
        try:
            response = send()
        except (requests.ConnectionError, requests.Timeout) as exc:
            refused = connection_refused(exc)
            if refused is not None:
                refusals += 1
                if last or refusals > 1:
                    raise TransportFailure(refused, attempt + 1, refused=True) from exc
                log.debug("%s: connection refused; one quick retry", what)
                sleep(min(REFUSED_RETRY_S, backoff.cap))
                continue
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
