"""A small GitHub REST client that respects rate limits and caches by ETag.

Why our own: the crawler needs exactly four calls (code search, repository metadata, raw file contents,
pagination) and strict behaviour around limits — primary limits (``X-RateLimit-Remaining: 0`` → wait until
``X-RateLimit-Reset``), secondary limits (403/429 with ``Retry-After``, or without it: exponential back-off)
and conditional requests (``If-None-Match``; a 304 does not count against the limit). ``sleep`` and
``clock`` are injectable so tests run against a real local server without waiting for real.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import requests

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
    """A successful (or cached) response: ``body`` is bytes, ``json()`` decodes it."""

    status: int
    body: bytes
    headers: Mapping[str, str]
    links: Mapping[str, str]
    from_cache: bool = False

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8"))


@dataclass
class ClientStats:
    """Counters of one client's life; the crawl report includes them."""

    requests: int = 0
    not_modified: int = 0
    not_found: int = 0
    primary_waits: int = 0
    secondary_waits: int = 0
    server_retries: int = 0
    seconds_waited: float = 0.0


@dataclass
class _Limit:
    remaining: int | None = None
    reset: float | None = None


class GitHubClient:
    """GET requests against a GitHub REST API base URL (github.com, GitHub Enterprise, or a test server).

    Args:
        base_url: e.g. ``https://api.github.com`` or ``https://HOST/api/v3``.
        token: sent as ``Authorization: Bearer``; None for anonymous (60 requests/hour on github.com).
        cache_dir: ETag cache folder (bodies and ETags by URL); None disables conditional requests.
        sleep, clock: injectable ``time.sleep`` / ``time.time``.
        max_retries: retries for rate limits and 5xx/connection errors before GitHubError.
        secondary_backoff: first wait (seconds) for a secondary limit that gives no Retry-After; doubles.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        cache_dir: Path | None = None,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        timeout: float = 30.0,
        max_retries: int = 6,
        secondary_backoff: float = 60.0,
        server_backoff: float = 2.0,
    ) -> None:
        self.base_url = base_url.rstrip("/") + "/"
        self.token = token
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.session = session or requests.Session()
        self.sleep = sleep
        self.clock = clock
        self.timeout = timeout
        self.max_retries = max_retries
        self.secondary_backoff = secondary_backoff
        self.server_backoff = server_backoff
        self.stats = ClientStats()
        self._limit = _Limit()

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

    def _cache_paths(self, url: str, params: Mapping[str, Any], accept: str) -> tuple[Path, Path] | None:
        if self.cache_dir is None:
            return None
        key = hashlib.sha256(json.dumps([url, sorted(params.items()), accept], default=str).encode()).hexdigest()
        folder = self.cache_dir / key[:2]
        return folder / f"{key}.json", folder / f"{key}.body"

    def _wait_for_primary_reset(self) -> None:
        if self._limit.remaining == 0 and self._limit.reset is not None:
            wait = self._limit.reset - self.clock() + 1.0
            if wait > 0:
                log.info("GitHub rate limit used up; waiting %.0f s for the reset", wait)
                self.stats.primary_waits += 1
                self._sleep(wait)
            self._limit.remaining = None

    def _sleep(self, seconds: float) -> None:
        self.stats.seconds_waited += seconds
        self.sleep(seconds)

    def _note_limit(self, response: requests.Response) -> None:
        remaining = response.headers.get("X-RateLimit-Remaining")
        reset = response.headers.get("X-RateLimit-Reset")
        try:
            self._limit.remaining = int(remaining) if remaining is not None else self._limit.remaining
            self._limit.reset = float(reset) if reset is not None else self._limit.reset
        except ValueError:
            log.debug("ignoring malformed rate-limit headers %r / %r", remaining, reset)

    def _limit_wait(self, response: requests.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying a 403/429, or None when it is not a rate limit."""
        retry_after = response.headers.get("Retry-After")
        if retry_after is not None:
            try:
                self.stats.secondary_waits += 1
                return max(0.0, float(retry_after))
            except ValueError:
                pass
        if response.headers.get("X-RateLimit-Remaining") == "0" and response.headers.get("X-RateLimit-Reset"):
            self.stats.primary_waits += 1
            return max(0.0, float(response.headers["X-RateLimit-Reset"]) - self.clock()) + 1.0
        text = response.text[:500].lower()
        if response.status_code == 429 or "rate limit" in text or "abuse" in text:
            self.stats.secondary_waits += 1
            return self.secondary_backoff * (2**attempt)
        return None

    def _request(self, url: str, params: dict[str, Any], accept: str) -> GitHubResponse | None:
        cache = self._cache_paths(url, params, accept)
        cached_meta: dict[str, Any] | None = None
        if cache and cache[0].exists() and cache[1].exists():
            try:
                cached_meta = json.loads(cache[0].read_text())
            except (OSError, json.JSONDecodeError):
                cached_meta = None
        for attempt in range(self.max_retries + 1):
            self._wait_for_primary_reset()
            headers = {"Accept": accept, "X-GitHub-Api-Version": "2022-11-28", "User-Agent": "jupiter-nbqa"}
            if self.token:
                headers["Authorization"] = f"Bearer {self.token}"
            if cached_meta and cached_meta.get("etag"):
                headers["If-None-Match"] = cached_meta["etag"]
            self.stats.requests += 1
            try:
                response = self.session.get(url, params=params, headers=headers, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as exc:
                if attempt >= self.max_retries:
                    raise GitHubError(f"GET {url}: {type(exc).__name__}: {exc}") from None
                self.stats.server_retries += 1
                self._sleep(self.server_backoff * (2**attempt))
                continue
            self._note_limit(response)
            status = response.status_code
            if status == 304 and cached_meta and cache:
                self.stats.not_modified += 1
                return GitHubResponse(200, cache[1].read_bytes(), dict(cached_meta.get("headers", {})),
                                      dict(cached_meta.get("links", {})), from_cache=True)
            if status == 404:
                self.stats.not_found += 1
                return None
            if status in (403, 429):
                wait = self._limit_wait(response, attempt)
                if wait is None:
                    raise GitHubError(f"GET {response.url}: forbidden ({status}): {response.text[:200]}", status)
                if attempt >= self.max_retries:
                    raise GitHubError(f"GET {response.url}: still rate-limited after {attempt} retries", status)
                log.info("GitHub %d on %s; waiting %.0f s", status, response.url, wait)
                self._limit.remaining = None  # the wait below covers the reset
                self._sleep(wait)
                continue
            if status >= 500:
                if attempt >= self.max_retries:
                    raise GitHubError(f"GET {response.url}: server error {status}", status)
                self.stats.server_retries += 1
                self._sleep(self.server_backoff * (2**attempt))
                continue
            if not response.ok:
                raise GitHubError(f"GET {response.url}: HTTP {status}: {response.text[:200]}", status)
            links = {rel: info["url"] for rel, info in response.links.items() if "url" in info}
            kept_headers = {k: v for k, v in response.headers.items() if k.lower() in {"content-type", "etag"}}
            if cache and response.headers.get("ETag"):
                cache[0].parent.mkdir(parents=True, exist_ok=True)
                cache[1].write_bytes(response.content)
                cache[0].write_text(json.dumps({"etag": response.headers["ETag"], "headers": kept_headers,
                                                "links": links, "url": url}))
            return GitHubResponse(status, response.content, kept_headers, links)
        raise GitHubError(f"GET {url}: gave up after {self.max_retries} retries")
