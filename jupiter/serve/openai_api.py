"""OpenAI-compatible endpoints of ``jupiter serve``: ``/v1/models``, ``/v1/chat/completions``, ``/v1/files``.

Why: the tools users already have speak OpenAI's chat API (the official SDKs, LangChain, LlamaIndex, IDE assistants,
evaluation harnesses). Behind this API a chat request is a job like any other (``POST /v1/tasks``): the last user
message is the question, its ``file`` content parts (base64 ``file_data`` with a ``filename``, or a ``file_id`` from
``POST /v1/files``) are the data files, and ``constraints``, ``format`` and ``settings`` may come in the request body
(the SDKs' ``extra_body``). The answer comes back as the assistant's message, with one line saying how it was
decided; the job's id and the links to its tree and notebook are in the extension field ``jupiter``.

- **Models** are the search modes: ``jupiter-mcts`` (tree search, ``infer``), ``jupiter-vote``, ``jupiter-react``.
- **Streaming** (``stream: true``): a first chunk at once (the assistant's role), a chunk with the search's
  progress in ``jupiter`` whenever it changes, the answer as the last content chunk with ``usage``, then ``[DONE]``.
- **usage** counts the policy's tokens for the job (prompt and completion).
- **Errors** have OpenAI's shape (``{"error": {"message", "type", "param", "code"}}``): an unknown model is 404;
  no user message, or a file part that is not base64, 400; a file over the server's upload limit, 413, naming it.
- **A client that goes away loses nothing**: the job goes on and is listed by ``GET /v1/tasks``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import io
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from jupiter.serve.jobs import SubmissionError, check_file_name
from jupiter.serve.store import JobRecord, JobStatus

__all__ = ["MODELS", "add_openai_routes", "OpenAIError"]

#: model id -> search mode
MODELS = {"jupiter-mcts": "infer", "jupiter-vote": "vote", "jupiter-react": "react"}
_POLL_S = 0.1  # how often a waiting request looks at its job (a row read off the event loop)
_FILES = "_openai_files"  # under the server's data root: what POST /v1/files stored, one folder per file id

#: submit(server, task_text, uploads, names, settings) -> job id: the app's own registration of a job
Submit = Callable[[Any, str, list[Any], list[str], dict[str, Any]], Awaitable[str]]


class OpenAIError(ValueError):
    """A request refused in OpenAI's error shape."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.param, self.code = status, param, code

    def response(self) -> JSONResponse:
        fallback = "invalid_request_error" if self.status < 500 else "server_error"
        kind = {401: "authentication_error", 404: "not_found_error", 429: "rate_limit_error"}.get(self.status, fallback)
        return JSONResponse({"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}},
                            status_code=self.status)


class _Upload:
    """A decoded file part, as the job registration reads an upload (``.file``)."""

    def __init__(self, data: bytes) -> None:
        self.file = io.BytesIO(data)


def _model_list() -> dict[str, Any]:
    return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "jupiter"}
                                       for name in MODELS]}


def _decode(data: str, filename: str) -> bytes:
    """A part's ``file_data``: base64, optionally as a ``data:`` URL."""
    if data.startswith("data:"):
        data = data.partition(",")[2]
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise OpenAIError(f"file {filename!r}: file_data is not base64", param="messages") from None


def _stored_file(root: Path, file_id: str) -> tuple[str, bytes]:
    folder = root / _FILES / check_file_name(file_id)
    found = sorted(folder.iterdir()) if folder.is_dir() else []
    if not found:
        raise OpenAIError(f"no file {file_id!r}: upload it with POST /v1/files first", status=404, param="messages")
    return found[0].name, found[0].read_bytes()


def _question_and_files(body: dict[str, Any], root: Path, limit: int) -> tuple[str, list[tuple[str, bytes]]]:
    """The last user message's text and its file parts (name, bytes), checked against the upload limit."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise OpenAIError("messages: a list of chat messages is required", param="messages")
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not users:
        raise OpenAIError("messages: no user message (the last one is the question)", param="messages")
    content = users[-1].get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(parts, list):
        raise OpenAIError("messages: the user message's content must be text or a list of parts", param="messages")
    texts, files = [], []
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text", "")))
        elif kind == "file":
            spec = part.get("file") or {}
            if spec.get("file_id"):
                files.append(_stored_file(root, str(spec["file_id"])))
                continue
            name = check_file_name(spec.get("filename"))
            files.append((name, _decode(str(spec.get("file_data", "")), name)))
        else:
            raise OpenAIError(f"messages: content parts of type {kind!r} are not read; send text and file parts",
                              param="messages")
    for name, data in files:
        if len(data) > limit:
            raise OpenAIError(f"file {name!r}: {len(data)} bytes, over the server's upload limit of {limit} bytes",
                              status=413, param="messages")
    if sum(len(d) for _, d in files) > limit:
        raise OpenAIError(f"files: {sum(len(d) for _, d in files)} bytes together, over the server's upload limit "
                          f"of {limit} bytes", status=413, param="messages")
    question = "\n".join(t for t in texts if t.strip()).strip()
    if not question:
        raise OpenAIError("messages: the last user message has no text (the question)", param="messages")
    return question, files


def _usage(record: JobRecord) -> dict[str, int]:
    stats = (record.result or {}).get("stats") or {}
    prompt, completion = int(stats.get("prompt_tokens") or 0), int(stats.get("completion_tokens") or 0)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _how_decided(record: JobRecord) -> str:
    result = record.result or {}
    votes = result.get("vote_table") or []
    total = sum(int(v.get("count", 0)) for v in votes)
    top = int(votes[0].get("count", 0)) if votes else 0
    how = {"vote": "majority vote", "value": "the value model's highest estimate"}.get(result.get("decided_by"),
                                                                                       str(result.get("decided_by")))
    return (f"Decided by {how}: {top} of {total} answers agree ({result.get('iterations')} iterations, "
            f"{result.get('nodes')} nodes).")


def _extension(record: JobRecord) -> dict[str, Any]:
    base = f"/v1/tasks/{record.id}"
    return {"job_id": record.id, "status": record.status.value, "progress": dict(record.progress),
            "links": {"job": base, "events": f"{base}/events", "tree": f"{base}/tree.html",
                      "tree_json": f"{base}/tree.json", "notebook": f"{base}/solution.ipynb"}}


def _answer_text(record: JobRecord) -> str:
    answer = (record.result or {}).get("answer")
    return (answer if answer is not None else "No answer found.") + "\n\n" + _how_decided(record)


async def _wait(server: Any, job_id: str, on_change: Callable[[JobRecord], Awaitable[None]] | None = None
                ) -> JobRecord:
    seen: Any = None
    while True:
        record = await asyncio.to_thread(server.store.get, job_id)
        if record is None:
            raise OpenAIError(f"job {job_id} is gone", status=500)
        if on_change is not None and record.progress != seen:
            seen = dict(record.progress)
            await on_change(record)
        if record.status.finished:
            return record
        await asyncio.sleep(_POLL_S)


def add_openai_routes(app: FastAPI, server_of: Callable[[Request], Any], submit: Submit) -> None:
    """Add the three endpoints to ``app``; ``server_of(request)`` is the app's state, ``submit`` its job
    registration (the same as ``POST /v1/tasks``)."""

    @app.get("/v1/models", summary="OpenAI: the search modes as models")
    async def models() -> JSONResponse:
        return JSONResponse(_model_list())

    @app.post("/v1/files", summary="OpenAI: upload a data file for later chat requests (multipart: file, purpose)")
    async def upload(request: Request) -> JSONResponse:
        server = server_of(request)
        try:
            form = await request.form()
            upload = form.get("file")
            if upload is None or isinstance(upload, str):
                raise OpenAIError("file: a file upload is required", param="file")
            name = check_file_name(upload.filename)
            data = await upload.read()
            if len(data) > server.config.max_upload_bytes:
                raise OpenAIError(f"file {name!r}: {len(data)} bytes, over the server's upload limit of "
                                  f"{server.config.max_upload_bytes} bytes", status=413, param="file")
            file_id = f"file-{uuid.uuid4().hex}"
            folder = Path(server.config.data_root) / _FILES / file_id
            await asyncio.to_thread(_store, folder, name, data)
        except SubmissionError as exc:
            return OpenAIError(str(exc), exc.status, param="file").response()
        except OpenAIError as exc:
            return exc.response()
        return JSONResponse({"id": file_id, "object": "file", "bytes": len(data), "created_at": int(time.time()),
                             "filename": name, "purpose": str(form.get("purpose") or "user_data")})

    @app.post("/v1/chat/completions", summary="OpenAI: a data question as a chat; the answer as the reply")
    async def chat(request: Request) -> Any:
        server = server_of(request)
        try:
            try:
                body = json.loads(await request.body())
            except json.JSONDecodeError as exc:
                raise OpenAIError(f"the body is not JSON: {exc}") from None
            if not isinstance(body, dict):
                raise OpenAIError("the body must be a JSON object")
            model = body.get("model")
            if model not in MODELS:
                raise OpenAIError(f"model {model!r} does not exist; the models are {', '.join(MODELS)}",
                                  status=404, param="model", code="model_not_found")
            question, files = _question_and_files(body, Path(server.config.data_root),
                                                  server.config.max_upload_bytes)
            settings = dict(body.get("settings") or {})
            settings["mode"] = MODELS[model]
            names = [name for name, _ in files]
            if len(set(names)) != len(names):
                raise OpenAIError("files: two file parts have the same filename", param="messages")
            task = {"id": f"chat-{uuid.uuid4().hex[:12]}", "question": question,
                    "constraints": str(body.get("constraints") or ""), "format": str(body.get("format") or ""),
                    "files": names}
            job_id = await submit(server, json.dumps(task), [_Upload(d) for _, d in files], names, settings)
        except SubmissionError as exc:
            return OpenAIError(str(exc), exc.status).response()
        except OpenAIError as exc:
            return exc.response()
        created = int(time.time())
        if body.get("stream"):
            return EventSourceResponse(_stream(server, job_id, str(model), created), sep="\n")
        record = await _wait(server, job_id)
        if record.status is not JobStatus.DONE:
            return OpenAIError(f"job {job_id} {record.status.value}: {record.error}", status=500).response()
        return JSONResponse({
            "id": f"chatcmpl-{job_id}", "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": _answer_text(record)},
                         "finish_reason": "stop", "logprobs": None}],
            "usage": _usage(record), "jupiter": _extension(record)})


def _store(folder: Path, name: str, data: bytes) -> None:
    folder.mkdir(parents=True, mode=0o700)
    (folder / name).write_bytes(data)


async def _stream(server: Any, job_id: str, model: str, created: int) -> AsyncIterator[ServerSentEvent]:
    """The chunks of a streamed answer: the role at once, progress as it changes, the answer, ``[DONE]``."""
    def chunk(delta: dict[str, Any], record: JobRecord | None = None, finish: str | None = None,
              usage: dict[str, int] | None = None) -> ServerSentEvent:
        data: dict[str, Any] = {"id": f"chatcmpl-{job_id}", "object": "chat.completion.chunk", "created": created,
                                "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                                                             "logprobs": None}]}
        if record is not None:
            data["jupiter"] = _extension(record)
        if usage is not None:
            data["usage"] = usage
        return ServerSentEvent(json.dumps(data))

    yield chunk({"role": "assistant", "content": ""})
    updates: asyncio.Queue[JobRecord] = asyncio.Queue()

    async def changed(record: JobRecord) -> None:
        await updates.put(record)

    waiting = asyncio.create_task(_wait(server, job_id, changed))
    try:  # a client that goes away cancels this generator: the watch ends, the job goes on
        while not (waiting.done() and updates.empty()):
            getter = asyncio.create_task(updates.get())
            done, _ = await asyncio.wait({getter, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if getter in done:
                record = getter.result()
                if not record.status.finished:
                    yield chunk({}, record)
            else:
                getter.cancel()
    finally:
        if not waiting.done():
            waiting.cancel()
    record = waiting.result()
    if record.status is not JobStatus.DONE:
        yield ServerSentEvent(json.dumps({"error": {"message": f"job {job_id} {record.status.value}: {record.error}",
                                                    "type": "server_error", "param": None, "code": None}}))
        return
    yield chunk({"content": _answer_text(record)}, record, finish="stop", usage=_usage(record))
    yield ServerSentEvent("[DONE]")
