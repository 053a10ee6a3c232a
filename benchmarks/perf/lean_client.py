"""A lean HTTP client for the load benchmark (``serve_load.py --client lean``): submit and status, nothing more.

Why a second client: where the load generator shares the machine's cores with the server, the generator's own
CPU is part of the latency it measures. ``jupiter.client.Client`` is built on ``requests`` and costs 1.6-1.7 ms
of CPU per submit on the 2-core benchmark machine; the 20 client threads of one process build their requests one
at a time under its GIL, so a burst's last request leaves 20 x that after the first. This client costs 0.6-0.7
ms per submit: ``http.client`` over one keep-alive connection, the multipart body built by hand. Load generators
(wrk, k6) are lean for the same reason: the server's latency, not the client's, is what is measured.

It raises ``jupiter.client``'s exceptions (``ServerUnreachable`` while the server is down, ``ClientError`` with
the HTTP status otherwise), so the benchmark retries and counts both clients alike.
"""
from __future__ import annotations

import http.client
import json
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping

from jupiter.client import ClientError, ServerUnreachable, mime_type
from jupiter.serve.timing import server_ms

__all__ = ["LeanClient"]


class LeanClient:
    """``submit`` and ``status`` against the server at ``url`` (http only), over one keep-alive connection.

    ``on_server_ms(method, ms)`` is called with the server's own time of each successful request (its
    ``Server-Timing`` header). One instance per thread: a connection carries one request at a time.
    """

    def __init__(self, url: str, token: str | None = None, timeout: float = 30.0,
                 on_server_ms: Callable[[str, float], None] | None = None) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ClientError(f"server URL {url!r}: the lean client speaks plain http://host:port only")
        self._host, self._port = parts.hostname, parts.port or 80
        self._timeout = timeout
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._on_server_ms = on_server_ms
        self._conn: http.client.HTTPConnection | None = None

    def submit(self, task: Mapping[str, Any], files: list[Path], settings: Mapping[str, Any] | None = None) -> str:
        """Queue ``task`` (a task dict) with the data ``files``; returns the job id."""
        boundary = uuid.uuid4().hex
        parts = [_field(boundary, "task", json.dumps(dict(task)).encode("utf-8"))]
        if settings:
            parts.append(_field(boundary, "settings", json.dumps(dict(settings)).encode("utf-8")))
        for path in files:
            parts.append(_field(boundary, "files", path.read_bytes(), filename=path.name,
                                content_type=mime_type(path.name)))
        parts.append(f"--{boundary}--\r\n".encode("ascii"))
        body = self._json("POST", "/v1/tasks", b"".join(parts),
                          {"Content-Type": f"multipart/form-data; boundary={boundary}"})
        job_id = body.get("id")
        if not isinstance(job_id, str) or not job_id:
            raise ClientError(f"POST /v1/tasks: the reply has no job id ({body})")
        return job_id

    def status(self, job_id: str) -> dict[str, Any]:
        """The job JSON (``GET /v1/tasks/{id}``)."""
        return self._json("GET", f"/v1/tasks/{job_id}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _json(self, method: str, path: str, body: bytes | None = None,
              headers: Mapping[str, str] | None = None) -> dict[str, Any]:
        status, timing, data = self._request(method, path, body, {**self._headers, **(headers or {})})
        if status >= 400:
            raise ClientError(f"{method} {path}: HTTP {status}: {data[:300].decode('utf-8', 'replace')}", status)
        if self._on_server_ms is not None:
            took = server_ms(timing)
            if took is not None:
                self._on_server_ms(method, took)
        reply = json.loads(data)
        if not isinstance(reply, dict):
            raise ClientError(f"{method} {path}: expected a JSON object, got {type(reply).__name__}", status)
        return reply

    def _request(self, method: str, path: str, body: bytes | None,
                 headers: dict[str, str]) -> tuple[int, str | None, bytes]:
        # A kept-alive connection the server has closed meanwhile fails on first use: a GET is tried once more on
        # a new one; a POST is not (it may have been accepted), the caller decides, as with jupiter.client.
        for attempt in (1, 2):
            reused = self._conn is not None
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self._host, self._port, timeout=self._timeout)
            try:
                self._conn.request(method, path, body=body, headers=headers)
                response = self._conn.getresponse()
                data = response.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if reused and attempt == 1 and method == "GET":
                    continue
                raise ServerUnreachable(f"no Jupiter server at http://{self._host}:{self._port} "
                                        f"({type(exc).__name__}: {exc})") from None
            if response.will_close:
                self.close()
            return response.status, response.getheader("server-timing"), data
        raise AssertionError("unreachable")


def _field(boundary: str, name: str, value: bytes, filename: str | None = None,
           content_type: str | None = None) -> bytes:
    """One multipart/form-data part (names and file names here are plain: the benchmark's own)."""
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename is not None else "")
    head = f"--{boundary}\r\nContent-Disposition: {disposition}\r\n"
    if content_type:
        head += f"Content-Type: {content_type}\r\n"
    return head.encode("utf-8") + b"\r\n" + value + b"\r\n"
