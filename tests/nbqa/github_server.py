"""A real HTTP server on 127.0.0.1 that answers like the GitHub REST API, from in-memory fixtures.

It serves code search (with ``size:LO..HI`` filtering, ``per_page``/``page`` pagination, ``Link`` headers and
a configurable per-query result cap), repository metadata with ETags (304 on ``If-None-Match``; ``Vary`` as
GitHub sends it) and raw file
contents. Faults are scripted: the next request matching a path prefix gets a given status and headers
(a 403 primary rate limit with reset, a 429 with Retry-After, a 502). A path can be made to hang until
released, so a test can kill a crawler mid-download. Every request is logged.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse


@dataclass
class Fault:
    prefix: str
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=lambda: {"message": "API rate limit exceeded"})
    query: str = ""  # only requests whose raw query string contains this


@dataclass
class Fixture:
    repos: dict[str, dict[str, Any]]  # full_name -> {"default_branch", "license", "files": {path: bytes}}
    result_cap: int = 1000
    faults: list[Fault] = field(default_factory=list)
    hang: set[str] = field(default_factory=set)  # request paths that block until release.set()
    release: threading.Event = field(default_factory=threading.Event)
    log: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def notebooks(self) -> list[tuple[str, str, bytes]]:
        return sorted(
            (repo, path, data) for repo, info in self.repos.items()
            for path, data in info["files"].items() if path.endswith(".ipynb")
        )


def _handler(fixture: Fixture):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output clean
            return

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                  content_type: str = "application/json") -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(data).encode(), headers)

        def do_GET(self) -> None:  # http.server's naming
            parsed = urlparse(self.path)
            path, query = unquote(parsed.path), parse_qs(parsed.query)
            with fixture.lock:
                fixture.log.append({"path": path, "query": {k: v[0] for k, v in query.items()},
                                    "if_none_match": self.headers.get("If-None-Match"),
                                    "auth": self.headers.get("Authorization"), "accept": self.headers.get("Accept")})
                fault = next((f for f in fixture.faults
                              if path.startswith(f.prefix) and f.query in parsed.query), None)
                if fault:
                    fixture.faults.remove(fault)
            if fault:
                self._json(fault.status, fault.body, fault.headers)
                return
            if path in fixture.hang:
                fixture.release.wait(timeout=120)
            if path == "/search/code":
                self._search(query)
            elif m := re.fullmatch(r"/repos/([^/]+/[^/]+)", path):
                self._repo(m.group(1))
            elif m := re.fullmatch(r"/repos/([^/]+/[^/]+)/contents/(.+)", path):
                self._contents(m.group(1), m.group(2))
            else:
                self._json(404, {"message": "Not Found"})

        def _search(self, query: dict[str, list[str]]) -> None:
            q = query.get("q", [""])[0]
            m = re.search(r"size:(\d+)\.\.(\d+)", q)
            lo, hi = (int(m.group(1)), int(m.group(2))) if m else (0, 10**12)
            hits = [(r, p, d) for r, p, d in fixture.notebooks() if lo <= len(d) <= hi]
            per_page = int(query.get("per_page", ["30"])[0])
            page = int(query.get("page", ["1"])[0])
            reachable = hits[: fixture.result_cap]
            chunk = reachable[(page - 1) * per_page: page * per_page]
            items = [{"name": p.rsplit("/", 1)[-1], "path": p, "sha": hashlib.sha1(d).hexdigest(),
                      "url": f"http://x/repositories/1/contents/{p}?ref=c0ffee",
                      "html_url": f"https://github.com/{r}/blob/c0ffee/{p}",
                      "repository": {"full_name": r}} for r, p, d in chunk]
            headers = {"X-RateLimit-Remaining": "29", "X-RateLimit-Reset": "0"}
            if page * per_page < len(reachable):
                host = self.headers.get("Host")
                nxt = f"http://{host}/search/code?q={q.replace(' ', '+')}&per_page={per_page}&page={page + 1}"
                headers["Link"] = f'<{nxt}>; rel="next"'
            self._json(200, {"total_count": len(hits), "incomplete_results": False, "items": items}, headers)

        def _repo(self, name: str) -> None:
            info = fixture.repos.get(name)
            if info is None:
                self._json(404, {"message": "Not Found"})
                return
            data = {"full_name": name, "default_branch": info.get("default_branch", "main"),
                    "license": {"spdx_id": info["license"]} if info.get("license") else None,
                    "stargazers_count": 3, "fork": False}
            etag = '"' + hashlib.sha1(json.dumps(data).encode()).hexdigest() + '"'
            vary = {"Vary": "Accept, Authorization, Cookie, X-GitHub-OTP"}  # as api.github.com sends it
            if self.headers.get("If-None-Match") == etag:
                self._send(304, b"", {"ETag": etag, **vary})
                return
            self._json(200, data, {"ETag": etag, **vary})

        def _contents(self, name: str, path: str) -> None:
            data = fixture.repos.get(name, {}).get("files", {}).get(path)
            if data is None:
                self._json(404, {"message": "Not Found"})
                return
            self._send(200, data, content_type="application/vnd.github.raw")

    return Handler


class GitHubFixtureServer:
    """Start with ``with GitHubFixtureServer(fixture) as server: server.url``; stops on exit."""

    def __init__(self, fixture: Fixture) -> None:
        self.fixture = fixture
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fixture))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> GitHubFixtureServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.fixture.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
