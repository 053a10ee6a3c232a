"""Bearer-token authentication as a pure ASGI middleware (it must not buffer Server-Sent-Event streams).

With a token set, every request needs ``Authorization: Bearer <token>`` except ``/healthz``, the page (``/``)
and its assets (``/static/...``): the page asks for the token and sends it. ``?token=`` is accepted on GET
requests too, because a browser's EventSource and plain download links cannot set headers.
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

__all__ = ["TokenAuth", "is_public_path"]

Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def is_public_path(path: str) -> bool:
    return path in ("/", "/healthz", "/favicon.ico") or path.startswith("/static/")


class TokenAuth:
    """Wraps an ASGI app; refuses non-public HTTP requests without the token (401, JSON ``{"error"}``)."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self._token = token.encode("utf-8") if token else None

    def _allowed(self, scope: Scope) -> bool:
        if self._token is None or is_public_path(scope.get("path", "")):
            return True
        for name, value in scope.get("headers", []):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token):
                    return True
        if scope.get("method") == "GET":
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            for given in query.get("token", []):
                if hmac.compare_digest(given.encode("utf-8"), self._token):
                    return True
        return False

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or self._allowed(scope):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"error": "missing or wrong token: send 'Authorization: Bearer <token>'"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", b'Bearer realm="jupiter"')]})
        await send({"type": "http.response.body", "body": body})
