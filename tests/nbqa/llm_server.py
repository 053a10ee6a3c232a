"""A real OpenAI-compatible chat server on 127.0.0.1 whose replies a test scripts per extraction stage.

The stage of a request is recognised from its first user message; each stage has a queue of replies
(the last one repeats). A reply is a string (the assistant's content), a JSON-able object, or
``(status, body[, headers])`` for an HTTP failure. Every request body is logged so tests can count attempts
and read the retry messages. The server is ``tests.llm.servers.ScriptedOpenAI``.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from tests.llm.servers import ScriptedOpenAI

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
    """The replies, as ``ScriptedOpenAI``'s ``reply`` callable."""

    def __init__(self, script: dict[str, list[Any]]) -> None:
        self.script = {k: list(v) for k, v in script.items()}
        self.log: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def __call__(self, body: dict[str, Any], index: int = 0) -> str | tuple:
        stage = stage_of(body["messages"])
        with self.lock:
            self.log.append({"stage": stage, "body": body})
            queue = self.script.get(stage) or ["{}"]
            reply = queue.pop(0) if len(queue) > 1 else queue[0]
        return reply if isinstance(reply, (str, tuple)) else json.dumps(reply)

    def calls(self, stage: str) -> int:
        return sum(1 for entry in self.log if entry["stage"] == stage)


def scripted_server(llm: ScriptedLLM) -> ScriptedOpenAI:
    """The server answering with ``llm``'s replies, 100 prompt and 10 completion tokens a call."""
    return ScriptedOpenAI(reply=llm, usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110})
