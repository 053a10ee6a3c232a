"""A real OpenAI-compatible chat server on 127.0.0.1 whose replies a test scripts per extraction stage.

The stage of a request is recognised from its first user message; each stage has a queue of replies
(the last one repeats). A reply is a string (the assistant's content), or ``(status, body)`` for an HTTP
failure. Every request body is logged so tests can count attempts and read the retry messages.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

STAGE_MARKERS = {
    "quality": "Give a score from 1 to 5",
    "models": "Name every machine-learning model",
    "tasks": "self-contained questions",
    "constraints": "For the question below, write:",
    "solution": "Rebuild, from the notebook's own code cells",
    "answer_check": "Check the exercise below",
    "constraint_check": "Check the constraints, answer format",
}


def stage_of(messages: list[dict[str, str]]) -> str:
    first_user = next(m["content"] for m in messages if m["role"] == "user")
    return next((stage for stage, marker in STAGE_MARKERS.items() if marker in first_user), "unknown")


class ScriptedLLM:
    def __init__(self, script: dict[str, list[Any]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def next_reply(self, body: dict[str, Any]) -> Any:
        stage = stage_of(body["messages"])
        with self.lock:
            self.log.append({"stage": stage, "body": body})
            queue = self.script.get(stage) or ["{}"]
            return queue.pop(0) if len(queue) > 1 else queue[0]

    def calls(self, stage: str) -> int:
        return sum(1 for entry in self.log if entry["stage"] == stage)


def _handler(llm: ScriptedLLM):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            if self.path != "/v1/chat/completions":
                self._send(404, {"error": "not found"})
                return
            reply = llm.next_reply(body)
            if isinstance(reply, tuple):
                self._send(reply[0], reply[1], reply[2] if len(reply) > 2 else None)
                return
            text = reply if isinstance(reply, str) else json.dumps(reply)
            self._send(200, {
                "id": "x", "object": "chat.completion", "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
            })

        def _send(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(raw)

    return Handler


class LLMFixtureServer:
    def __init__(self, llm: ScriptedLLM) -> None:
        self.llm = llm
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(llm))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "LLMFixtureServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)
