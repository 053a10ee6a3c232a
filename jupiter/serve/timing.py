"""``Server-Timing`` on every HTTP response: how long the server worked on the request, as a pure ASGI middleware.

Why: a client's latency mixes network, its own CPU and the server's queueing; the header lets a client (and
``benchmarks/perf/serve_load.py``) separate the server's part. The value is ``app;dur=<ms>``, measured from the
request reaching the app to the response's first byte (for a streamed response, its start), which is what
browsers' developer tools show under "Timing".
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["ServerTiming", "server_ms"]


class ServerTiming:
    """Wraps an ASGI app; adds ``server-timing: app;dur=<ms>`` to each HTTP response's headers."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def timed_send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                took = (time.perf_counter() - started) * 1000
                headers = list(message.get("headers", ()))
                headers.append((b"server-timing", f"app;dur={took:.2f}".encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, timed_send)


def server_ms(header: str | None) -> float | None:
    """The ``app`` duration in a ``Server-Timing`` header value (None when absent or malformed)."""
    for part in (header or "").split(","):
        name, _, params = part.strip().partition(";")
        if name.strip() != "app":
            continue
        for param in params.split(";"):
            key, _, value = param.strip().partition("=")
            if key == "dur":
                try:
                    return float(value)
                except ValueError:
                    return None
    return None
