"""Reusable model-server fixtures for tests: a scripted OpenAI-shaped HTTP server and a real vLLM server.

Import the fixtures into a test module or a conftest (``from tests.llm.servers import vllm_server``) or use
the helpers directly:

* ``ScriptedOpenAI``: a real HTTP server on 127.0.0.1 (free port, its own thread) that answers
  ``/v1/completions``, ``/v1/chat/completions`` and ``/v1/models`` in the OpenAI shape. Tests queue
  faults (``fail_next(429)``, ``raw_next(b"not json")``) and read back the requests it received.
* ``start_vllm_server(model_dir, ...)``: a real ``python -m vllm.entrypoints.openai.api_server`` on a free
  port serving a Hugging Face folder, with a small Gemma-turn chat template; ``VllmServer.stop()`` ends it by
  PID (its own process group). The ``vllm_server`` fixture (module scope) serves the embedded default model.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from tests.ports import free_port

__all__ = [
    "ScriptedOpenAI",
    "scripted_openai",
    "GEMMA_CHAT_TEMPLATE",
    "VllmServer",
    "start_vllm_server",
    "vllm_server",
]

SERVED_MODEL_NAME = "tiny-gemma"


# ------------------------------------------------------------------------------------ scripted server


def default_reply(request: dict, index: int) -> str:
    """The scripted server's reply text: echoes the last user message and the choice index."""
    if "messages" in request:
        last = request["messages"][-1]["content"]
    else:
        last = request.get("prompt", "")
    return f"reply {index} to: {last[-40:]}"


@dataclass
class ScriptedOpenAI:
    """An OpenAI-shaped HTTP server with scripted faults; requests it received are in ``received``.

    ``reply(request, index)`` gives each choice's text, or ``(status, body[, headers])`` to answer the request
    with that HTTP failure instead; ``usage`` replaces the computed usage block. A context manager too.
    """

    reply: Callable[[dict, int], str | tuple] = default_reply
    model: str = "scripted-model"
    usage: dict | None = None
    received: list[dict] = field(default_factory=list)
    _faults: deque = field(default_factory=deque)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "server not started"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def fail_next(self, status: int, body: str = '{"error": "scripted"}', headers: dict | None = None) -> None:
        """The next POST answers ``status`` with ``body`` (queued in order)."""
        self._faults.append((status, body.encode(), headers or {}))

    def raw_next(self, body: bytes, status: int = 200) -> None:
        """The next POST answers exactly ``body`` (e.g. malformed JSON)."""
        self._faults.append((status, body, {}))

    def start(self) -> ScriptedOpenAI:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": owner.model}]}).encode())
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                request["_path"] = self.path
                request["_authorization"] = self.headers.get("Authorization")
                with owner._lock:
                    owner.received.append(request)
                    fault = owner._faults.popleft() if owner._faults else None
                if fault is not None:
                    self._send(*fault)
                    return
                if self.path.endswith("/completions"):
                    self._send(*owner._answer(request, chat=self.path.endswith("/chat/completions")))
                else:
                    self._send(404, b'{"error": "not found"}')

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        server = self._server
        self._thread = threading.Thread(
            target=lambda: server.serve_forever(poll_interval=0.05), name="scripted-openai", daemon=True
        )
        self._thread.start()
        return self

    def _answer(self, request: dict, chat: bool) -> tuple[int, bytes, dict]:
        choices = []
        total = 0
        for index in range(int(request.get("n", 1))):
            text = self.reply(request, index)
            if isinstance(text, tuple):  # a scripted HTTP failure
                return text[0], json.dumps(text[1]).encode(), text[2] if len(text) > 2 else {}
            tokens = text.split()
            total += len(tokens)
            choice: dict = {"index": index, "finish_reason": "stop"}
            logprobs = [-0.5 - 0.1 * index] * len(tokens)
            if chat:
                choice["message"] = {"role": "assistant", "content": text}
                if request.get("logprobs"):
                    choice["logprobs"] = {"content": [{"token": t, "logprob": lp} for t, lp in zip(tokens, logprobs)]}
            else:
                choice["text"] = text
                if request.get("logprobs") is not None:
                    choice["logprobs"] = {"tokens": tokens, "token_logprobs": logprobs}
            choices.append(choice)
        return 200, json.dumps({
            "id": "scripted",
            "object": "chat.completion" if chat else "text_completion",
            "model": request.get("model"),
            "choices": choices,
            "usage": self.usage or {"prompt_tokens": 7, "completion_tokens": total, "total_tokens": 7 + total},
        }).encode(), {}

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def scripted_openai() -> Iterator[ScriptedOpenAI]:
    """A started ``ScriptedOpenAI`` server, stopped after the test."""
    server = ScriptedOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------------ real vLLM server

#: A minimal chat template with Gemma's turns (the base model ships none); the system text opens the first
#: user turn, as ``jupiter.prompts.render_prompt(..., GEMMA)`` does, so both endpoints see the same prompt.
GEMMA_CHAT_TEMPLATE = """{{ bos_token }}{% set sys = namespace(text='') %}\
{% for m in messages %}{% if m['role'] == 'system' %}{% set sys.text = m['content'] + '\n\n' %}\
{% else %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else 'user' }}
{% if loop.index0 <= 1 %}{{ sys.text }}{% endif %}\
{{ m['content'] }}<end_of_turn>
{% endif %}{% endfor %}{% if add_generation_prompt %}<start_of_turn>model
{% endif %}"""


@dataclass
class VllmServer:
    """A running vLLM OpenAI-compatible server process (its own process group)."""

    process: subprocess.Popen
    url: str  # .../v1
    model: str
    log_path: Path

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server by its PID's process group: SIGTERM, then SIGKILL after ``timeout`` seconds."""
        if self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def start_vllm_server(
    model_dir: Path,
    work_dir: Path,
    served_name: str = SERVED_MODEL_NAME,
    startup_timeout: float = 300.0,
    extra_args: tuple[str, ...] = (),
) -> VllmServer:
    """Start ``vllm.entrypoints.openai.api_server`` on 127.0.0.1 and wait until ``/health`` answers 200.

    Uses the CPU settings from ENVIRONMENT.md (bf16, 4096 context, 512 MiB KV cache, eager mode) and reports
    cached prompt tokens in ``usage`` (``--enable-prompt-tokens-details``). The log is
    ``work_dir/vllm-server.log``; on a failed start the error carries its tail.
    """
    work_dir.mkdir(parents=True, exist_ok=True)
    template = work_dir / "gemma-chat.jinja"
    template.write_text(GEMMA_CHAT_TEMPLATE, encoding="utf-8")
    port = free_port()
    log_path = work_dir / "vllm-server.log"
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", _cpu_bind())
    command = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir), "--host", "127.0.0.1", "--port", str(port),
        "--dtype", "bfloat16", "--max-model-len", "4096", "--kv-cache-memory-bytes", str(512 * 2**20),
        "--served-model-name", served_name, "--enforce-eager", "--chat-template", str(template),
        "--enable-prompt-tokens-details",  # usage reports cached prompt tokens: the prefix-cache hit rate
        *extra_args,
    ]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=work_dir
        )
    server = VllmServer(process=process, url=f"http://127.0.0.1:{port}/v1", model=served_name, log_path=log_path)
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM server exited with {process.returncode}:\n{_tail(log_path)}")
        try:
            if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return server
        except requests.RequestException:
            pass
        time.sleep(1.0)
    server.stop()
    raise RuntimeError(f"vLLM server not healthy after {startup_timeout:.0f} s:\n{_tail(log_path)}")


def _cpu_bind() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    return f"{cpus[0]}-{cpus[-1]}" if cpus == list(range(cpus[0], cpus[-1] + 1)) else ",".join(map(str, cpus))


def _tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory) -> Iterator[VllmServer]:
    """A real vLLM server serving the embedded default model (skips where vLLM is not installed)."""
    pytest.importorskip("vllm")
    from jupiter.default_model import ensure_default_model

    server = start_vllm_server(ensure_default_model(), tmp_path_factory.mktemp("vllm-server"))
    try:
        yield server
    finally:
        server.stop()
