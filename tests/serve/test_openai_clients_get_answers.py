"""The OpenAI-compatible endpoints of ``jupiter serve``, called with the official ``openai`` SDK (sync, async and
streaming) against a real server on 127.0.0.1 (replay policy, real fork sandbox): the search modes as models, a data
question with its file as a chat, the answer with how it was decided, the job's links, usage, files uploaded
apart, OpenAI-shaped errors with the right status, the server's token as the API key, and a client that goes away
losing nothing."""

from __future__ import annotations

import base64
import json

import anyio
import openai
import pytest
import requests
from serve_helpers import TITANIC_DATA, TITANIC_REPLAY, TITANIC_TASK

TOKEN = "chat-token-0123456789"
SETTINGS = {"iterations": 6}


@pytest.fixture(scope="module")
def server(start_module_server):
    return start_module_server("--llm", f"replay:{TITANIC_REPLAY}", "--max-upload-mb", "0.2", token=TOKEN,
                               name="openai")


def _client(server, key: str = TOKEN) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0, timeout=120)


def _task() -> dict:
    return json.loads(TITANIC_TASK.read_text())


def _messages(data: bytes | None = None, name: str = "test_ave.csv", file_id: str | None = None) -> list[dict]:
    parts: list[dict] = [{"type": "text", "text": _task()["question"]}]
    if file_id is not None:
        parts.append({"type": "file", "file": {"file_id": file_id}})
    else:
        encoded = base64.b64encode(TITANIC_DATA.read_bytes() if data is None else data).decode()
        parts.append({"type": "file", "file": {"filename": name, "file_data": f"data:text/csv;base64,{encoded}"}})
    return [{"role": "system", "content": "You are a data analyst."}, {"role": "user", "content": parts}]


def _extra() -> dict:
    task = _task()
    return {"format": task["format"], "constraints": task.get("constraints", ""), "settings": SETTINGS}


def test_the_search_modes_are_the_models(server):
    assert [m.id for m in _client(server).models.list()] == ["jupiter-mcts", "jupiter-vote", "jupiter-react"]


def test_a_chat_with_a_data_file_gets_the_answer_how_it_was_decided_usage_and_links(server):
    completion = _client(server).chat.completions.create(model="jupiter-mcts", messages=_messages(),
                                                         extra_body=_extra())
    answer, _, how = completion.choices[0].message.content.partition("\n\n")
    assert answer == "@mean_fare[34.65]" and how.startswith("Decided by majority vote:")
    assert completion.choices[0].finish_reason == "stop"
    usage = completion.usage
    assert usage.completion_tokens > 0 and usage.total_tokens >= usage.completion_tokens
    jupiter = completion.model_extra["jupiter"]
    assert jupiter["status"] == "done" and completion.id == f"chatcmpl-{jupiter['job_id']}"
    tree = requests.get(server.url + jupiter["links"]["tree"], headers=server.headers(), timeout=30)
    notebook = requests.get(server.url + jupiter["links"]["notebook"], headers=server.headers(), timeout=30)
    assert tree.status_code == 200 and notebook.status_code == 200 and "34.65" in notebook.text


def test_a_streamed_chat_sends_the_role_first_progress_then_the_answer_with_usage(server):
    stream = _client(server).chat.completions.create(model="jupiter-mcts", messages=_messages(),
                                                     extra_body=_extra(), stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert content.startswith("@mean_fare[34.65]\n\nDecided by")
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.completion_tokens > 0
    progress = [c.model_extra["jupiter"]["progress"] for c in chunks[1:-1]]
    assert progress and all("iterations" in p for p in progress)


def test_the_async_client_and_a_file_uploaded_apart(server):
    client = _client(server)
    uploaded = client.files.create(file=("test_ave.csv", TITANIC_DATA.read_bytes()), purpose="user_data")
    assert uploaded.id.startswith("file-") and uploaded.filename == "test_ave.csv"

    async def ask() -> str:
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=TOKEN, max_retries=0) as client:
            completion = await client.chat.completions.create(
                model="jupiter-vote", messages=_messages(file_id=uploaded.id), extra_body=_extra())
            return completion.choices[0].message.content

    assert anyio.run(ask).startswith("@mean_fare[")


def test_errors_have_openais_shape_and_status(server):
    client = _client(server)
    with pytest.raises(openai.NotFoundError, match="jupiter-mcts"):
        client.chat.completions.create(model="gpt-4o", messages=_messages())
    with pytest.raises(openai.BadRequestError, match="no user message"):
        client.chat.completions.create(model="jupiter-mcts", messages=[{"role": "system", "content": "hi"}])
    bad = [{"role": "user", "content": [{"type": "text", "text": "Mean?"},
                                        {"type": "file", "file": {"filename": "x.csv", "file_data": "%%%"}}]}]
    with pytest.raises(openai.BadRequestError, match="x.csv.*not base64"):
        client.chat.completions.create(model="jupiter-mcts", messages=bad)
    with pytest.raises(openai.APIStatusError, match="big.csv") as too_big:
        client.chat.completions.create(model="jupiter-mcts", messages=_messages(b"x" * 300_000, "big.csv"))
    assert too_big.value.status_code == 413
    assert too_big.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.AuthenticationError):
        _client(server, key="wrong").models.list()


def test_a_client_that_goes_away_loses_nothing(server):
    stream = _client(server).chat.completions.create(model="jupiter-mcts", messages=_messages(),
                                                     extra_body=_extra(), stream=True)
    first = next(iter(stream))
    stream.close()  # the client goes away after the first chunk
    assert first.choices[0].delta.role == "assistant"
    job_id = first.id.removeprefix("chatcmpl-")
    record = {}
    for _ in range(600):
        record = requests.get(f"{server.url}/v1/tasks/{job_id}", headers=server.headers(), timeout=30).json()
        if record["status"] in ("done", "failed", "cancelled"):
            break
        anyio.run(anyio.sleep, 0.2)
    assert record["status"] == "done" and record["result"]["answer"] == "@mean_fare[34.65]"
