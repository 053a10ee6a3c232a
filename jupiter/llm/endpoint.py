"""One OpenAI-compatible server (vLLM, SGLang, llama.cpp server, hosted APIs): JSON calls with retries.

The one HTTP client of the model servers: the policy backend (``jupiter.llm.openai_http``) and the NbQA
pipeline's chat client (``nbqa_pipeline.llm_client``) both call through it, so that both treat failures alike.

Why ``requests`` and not the ``openai`` SDK: the project already depends on ``requests``, and the policy needs
what the SDK types away or does not say: ``/completions`` with a prompt we render, vLLM's per-token log-probs
in both modes, its cached-token counts, a seed per request, and a count of the attempts each call took; the SDK
would be a new dependency of the base install (today it comes only with vLLM) with its own retry rule.

The retry rule is urllib3's ``Retry`` on the session's adapter:
- 429, 500, 502, 503 and 504, resets and read timeouts are retried up to ``max_retries`` times: the first retry
  at once, then after ``backoff`` × 2, × 4, … seconds, at most ``max_backoff``; a server's numeric
  ``Retry-After`` replaces that wait (capped the same). When the retries are spent the last response is returned.
- a connection that cannot be made (refused, unknown host) is retried once, at once, then fails: nothing listens
  there (a wrong port, a server not started), and a long back-off would only hide the mistake.
- other statuses are returned at once, for the caller to word.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import InvalidHeader, MaxRetryError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout
from urllib3.util.retry import Retry

__all__ = ["RETRY_STATUS", "Answer", "Endpoint", "Unreachable", "pooled_session"]

#: Statuses that mean "try again later" (rate limit, overloaded or restarting server); other 4xx/5xx are final.
RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class Unreachable(Exception):
    """No response after the retries: ``reason`` says why in a few words (``connection refused``, ``timed out``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Answer:
    """A call's last response (whatever its status) and the requests it took (1 + retries)."""

    response: requests.Response
    attempts: int


class _Retry(Retry):
    """urllib3's ``Retry`` whose waits go through ``sleeper`` (tests record them instead of waiting) and whose
    ``Retry-After`` is capped by ``backoff_max`` like the computed waits (one it cannot read counts as absent)."""

    def __init__(self, *args: Any, sleeper: Callable[[float], None] = time.sleep, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sleeper = sleeper

    def new(self, **kw: Any) -> _Retry:
        retry = super().new(**kw)
        retry.sleeper = self.sleeper
        return retry

    def sleep(self, response: Any = None) -> None:
        try:
            after = self.get_retry_after(response) if response is not None else None
        except InvalidHeader:
            after = None
        wait = min(after, self.backoff_max) if after is not None else self.get_backoff_time()
        if wait > 0:
            self.sleeper(wait)


def pooled_session(headers: Mapping[str, str], pool_size: int, retry: Retry) -> requests.Session:
    """A session sending ``headers``, with one kept-alive pool of ``pool_size`` connections for http and https
    whose requests follow ``retry`` (also what ``jupiter.client`` uses)."""
    session = requests.Session()
    session.headers.update(headers)
    adapter = HTTPAdapter(pool_connections=1, pool_maxsize=pool_size, max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class Endpoint:
    """JSON calls to the API root ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``); thread-safe.

    ``timeout`` is ``requests``' (seconds, or a (connect, read) pair); ``pool_size`` is the most connections kept
    alive (the caller's concurrency). Each process has its own session: a child forked with the endpoint does
    not share its parent's sockets.
    """

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout: float | tuple[float, float] = 600.0,
                 max_retries: int = 5, backoff: float = 0.5, max_backoff: float = 30.0, pool_size: int = 8,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._retry = _Retry(total=max_retries, connect=1, read=max_retries, status=max_retries,
                             other=max_retries, redirect=0, status_forcelist=RETRY_STATUS, allowed_methods=None,
                             backoff_factor=backoff, backoff_max=max_backoff, raise_on_status=False,
                             sleeper=sleep)
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._pid = -1
        self._session: requests.Session | None = None

    def _http(self) -> requests.Session:
        with self._lock:
            if self._session is None or self._pid != os.getpid():
                self._session, self._pid = pooled_session(self._headers, self._pool_size, self._retry), os.getpid()
            return self._session

    def call(self, method: str, path: str, payload: dict[str, Any] | None = None) -> Answer:
        """``method`` ``base_url + path`` with ``payload`` as JSON, retried by the rule above.

        Raises ``Unreachable`` when no response came."""
        try:
            response = self._http().request(method, self.base_url + path, json=payload, timeout=self.timeout)
        except requests.RequestException as exc:
            raise Unreachable(_reason(exc)) from exc
        return Answer(response, 1 + len(response.raw.retries.history))  # the Retry urllib3 ended with

    def close(self) -> None:
        with self._lock:
            if self._session is not None:
                self._session.close()
            self._session = None


def _reason(exc: requests.RequestException) -> str:
    """Why no response came, in a few words (``requests`` wraps urllib3's error as ``MaxRetryError.reason``)."""
    if isinstance(exc, requests.Timeout):
        return "timed out"
    cause: object = exc.args[0] if exc.args else exc
    if isinstance(cause, MaxRetryError) and cause.reason is not None:
        cause = cause.reason
    if isinstance(cause, NewConnectionError):  # checked first: urllib3 makes it a kind of timeout error
        if isinstance(cause.__cause__, ConnectionRefusedError):
            return "connection refused"
        return f"cannot connect: {cause.__cause__ or cause}"
    if isinstance(cause, Urllib3Timeout):
        return "timed out"
    return f"{type(cause).__name__}: {cause}"
