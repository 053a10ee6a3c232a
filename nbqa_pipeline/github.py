"""A small GitHub REST client: conditional requests by ``requests-cache``, retries by urllib3's ``Retry``.

``requests-cache`` (a SQLite file in ``cache_dir``) keeps each 200 that has an ETag and revalidates it on every use
(``If-None-Match``; a 304 costs no GitHub quota). ``Retry`` on the session's adapter retries connection errors and
5xx with back-off, and a 403/429 with ``Retry-After`` (a secondary limit) after the time it names. Left here, as
``Retry`` decides from the status and ``Retry-After`` alone: the primary limit (``X-RateLimit-Remaining: 0`` → wait
until ``X-RateLimit-Reset``, after a success that used the quota up and on a 403/429 that says so) and a secondary
limit that names no time (a 429, or a 403 whose message says rate limit or abuse: exponential back-off from
``secondary_backoff``); any other 403 fails at once. ``sleep`` and ``clock`` are injectable (``Retry`` sleeps
through the client too), so tests run against a real local server without waiting for real.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import requests
import requests_cache
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

__all__ = ["GitHubClient", "GitHubError", "GitHubResponse", "ClientStats"]

log = logging.getLogger(__name__)

JSON_ACCEPT = "application/vnd.github+json"
RAW_ACCEPT = "application/vnd.github.raw"


class GitHubError(RuntimeError):
    """A request failed for good (after retries, or a non-retryable status); names the URL and status."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class GitHubResponse:
    """A successful (or revalidated) response: ``body`` is bytes, ``json()`` decodes it."""

    status: int
    body: bytes
    headers: Mapping[str, str]
    links: Mapping[str, str]
    from_cache: bool = False

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


@dataclass
class ClientStats:
    """Counters of one client's life; the crawl report includes them. ``requests`` counts every request sent,
    retries included; ``not_modified`` the 304s that answered from the cache."""

    requests: int = 0
    not_modified: int = 0
    not_found: int = 0
    primary_waits: int = 0
    secondary_waits: int = 0
    server_retries: int = 0
    seconds_waited: float = 0.0


class _Retry(Retry):
    """urllib3's ``Retry`` that waits through the client (its injectable sleep, its counters). A 403 with
    ``Retry-After`` is GitHub's secondary limit, so 403 joins the statuses whose ``Retry-After`` is obeyed."""

    RETRY_AFTER_STATUS_CODES = frozenset({403, 413, 429, 503})
    client: GitHubClient  # set once made; ``new`` (each retry's copy) passes it on

    def new(self, **kw: Any) -> _Retry:
        retry = super().new(**kw)
        retry.client = self.client
        return retry

    def increment(self, *args: Any, **kwargs: Any) -> _Retry:
        retry = super().increment(*args, **kwargs)  # raises when the retries are spent: no request follows
        self.client.stats.requests += 1
        return retry

    def sleep(self, response: Any = None) -> None:
        after = self.get_retry_after(response) if response is not None else None
        self.client.stats.secondary_waits += after is not None
        self.client.stats.server_retries += after is None
        self.client._sleep(after if after is not None else self.get_backoff_time())


class GitHubClient:
    """GET requests against a GitHub REST API base URL (github.com, GitHub Enterprise, or a test server).

    Args:
        base_url: e.g. ``https://api.github.com`` or ``https://HOST/api/v3``.
        token: sent as ``Authorization: Bearer``; None for anonymous (60 requests/hour on github.com).
        cache_dir: folder of the response cache (``http_cache.sqlite``); None disables conditional requests.
        sleep, clock: injectable ``time.sleep`` / ``time.time``.
        max_retries: retries of one request before GitHubError, for 5xx and connection errors and for
            ``Retry-After`` limits (urllib3's count), and again for the limits handled here.
        secondary_backoff: first wait (seconds) for a secondary limit that gives no Retry-After; doubles.
        server_backoff: ``Retry``'s back-off factor for 5xx and connection errors: the first retry goes at
            once, then after ``server_backoff * 2**(n-1)`` s for the n-th consecutive failure.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        cache_dir: Path | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        timeout: float = 30.0,
        max_retries: int = 6,
        secondary_backoff: float = 60.0,
        server_backoff: float = 2.0,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.token = token
        self.sleep = sleep
        self.clock = clock
        self.timeout = timeout
        self.max_retries = max_retries
        self.secondary_backoff = secondary_backoff
        self.stats = ClientStats()
        self._reset_at: float | None = None  # the quota is used up until then (X-RateLimit-Reset)
        self.session = self._session(cache_dir, server_backoff)

    def _session(self, cache_dir: Path | None, server_backoff: float) -> requests.Session:
        if cache_dir is None:
            session = requests.Session()
        else:
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            # the key matches on Accept (a raw and a JSON answer of one URL differ); the token is never stored
            session = requests_cache.CachedSession(str(Path(cache_dir) / "http_cache.sqlite"), backend="sqlite",
                                                   expire_after=0, match_headers=["Accept"])
        retry = _Retry(total=self.max_retries, backoff_factor=server_backoff, status_forcelist=(500, 502, 503, 504),
                       allowed_methods=("GET",), raise_on_status=False, respect_retry_after_header=True)
        retry.client = self
        for prefix in ("http://", "https://"):
            session.mount(prefix, HTTPAdapter(max_retries=retry))
        return session

    # ------------------------------------------------------------------------------------------ public

    def get(self, path_or_url: str, params: Mapping[str, Any] | None = None, *,
            raw: bool = False) -> GitHubResponse | None:
        """GET a path (relative to the base URL) or a full URL; None on 404."""
        url = path_or_url if path_or_url.startswith(("http://", "https://")) else urljoin(
            self.base_url, path_or_url.lstrip("/")
        )
        return self._request(url, dict(params or {}), RAW_ACCEPT if raw else JSON_ACCEPT)

    def repository(self, full_name: str) -> dict[str, Any] | None:
        """Repository metadata (``default_branch``, ``license``, ...); None when it is gone."""
        response = self.get(f"repos/{quote(full_name, safe='/')}")
        return None if response is None else response.json()

    def file_bytes(self, full_name: str, path: str, ref: str | None = None) -> bytes | None:
        """The raw bytes of ``path`` in the repository at ``ref``; None when missing."""
        params = {"ref": ref} if ref else {}
        response = self.get(f"repos/{quote(full_name, safe='/')}/contents/{quote(path, safe='/')}", params, raw=True)
        if response is None:
            return None
        content_type = response.headers.get("Content-Type", "")
        if "json" in content_type and not path.endswith((".json", ".ipynb", ".geojson")):
            data = response.json()  # a server that ignored the raw media type: base64 JSON
            if isinstance(data, dict) and data.get("encoding") == "base64":
                return base64.b64decode(data.get("content", ""))
        return response.body

    # ---------------------------------------------------------------------------------------- internals

    def _sleep(self, seconds: float) -> None:
        self.stats.seconds_waited += seconds
        self.sleep(seconds)

    def _primary_wait(self, response: requests.Response) -> float | None:
        """Seconds until the quota resets when ``response`` says it is used up, else None."""
        if response.headers.get("X-RateLimit-Remaining") != "0":
            return None
        try:
            return max(0.0, float(response.headers["X-RateLimit-Reset"]) - self.clock()) + 1.0
        except (KeyError, ValueError):
            return None

    def _limit_wait(self, response: requests.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying a 403/429 that ``Retry`` passed on, or None when it is no rate limit."""
        if response.headers.get("Retry-After") is not None:  # Retry obeyed it max_retries times already
            raise GitHubError(f"GET {response.url}: still rate-limited after {self.max_retries} retries",
                              response.status_code)
        wait = self._primary_wait(response)
        if wait is not None:
            self.stats.primary_waits += 1
            return wait
        text = response.text[:500].lower()
        if response.status_code == 429 or "rate limit" in text or "abuse" in text:
            self.stats.secondary_waits += 1
            return self.secondary_backoff * (2**attempt)
        return None

    def _request(self, url: str, params: dict[str, Any], accept: str) -> GitHubResponse | None:
        headers = {"Accept": accept, "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "jupiter-nbqa"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        for attempt in range(self.max_retries + 1):
            if self._reset_at is not None:  # the last answer used the quota up: wait for its reset first
                wait, self._reset_at = self._reset_at - self.clock() + 1.0, None
                if wait > 0:
                    log.info("GitHub rate limit used up; waiting %.0f s for the reset", wait)
                    self.stats.primary_waits += 1
                    self._sleep(wait)
            self.stats.requests += 1
            try:
                response = self.session.get(url, params=params, headers=headers, timeout=self.timeout)
            except requests.RequestException as exc:  # connection errors, after Retry's attempts
                raise GitHubError(f"GET {url}: {type(exc).__name__}: {exc}") from None
            status = response.status_code
            if status in (403, 429):
                wait = self._limit_wait(response, attempt)
                if wait is None:
                    raise GitHubError(f"GET {response.url}: forbidden ({status}): {response.text[:200]}", status)
                if attempt >= self.max_retries:
                    raise GitHubError(f"GET {response.url}: still rate-limited after {attempt} retries", status)
                log.info("GitHub %d on %s; waiting %.0f s", status, response.url, wait)
                self._sleep(wait)
                continue
            if self._primary_wait(response) is not None:
                self._reset_at = float(response.headers["X-RateLimit-Reset"])
            if status == 404:
                self.stats.not_found += 1
                return None
            if status >= 500:
                raise GitHubError(f"GET {response.url}: server error {status}", status)
            if not response.ok:
                raise GitHubError(f"GET {response.url}: HTTP {status}: {response.text[:200]}", status)
            revalidated = getattr(response, "revalidated", False)
            self.stats.not_modified += revalidated
            links = {rel: info["url"] for rel, info in response.links.items() if "url" in info}
            kept = {k: v for k, v in response.headers.items() if k.lower() in {"content-type", "etag"}}
            return GitHubResponse(status, response.content, kept, links, from_cache=revalidated)
        raise GitHubError(f"GET {url}: gave up after {self.max_retries} retries")

